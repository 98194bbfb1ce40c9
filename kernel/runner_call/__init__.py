"""The runner call: the client of the runner tier and the gateway-side adaptive batcher in front of it."""
