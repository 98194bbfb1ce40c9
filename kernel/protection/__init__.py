"""Protection: admission and queue control, API keys and rate limits, circuit breakers, deadlines."""
