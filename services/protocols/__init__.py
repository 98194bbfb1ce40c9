"""Protocols besides the typed REST API, all over the same pipelines, validation, limits and fallbacks:

- typed gRPC (services/protocols/protos/triserve.proto) and the Open Inference Protocol v2 over gRPC
  (protos/grpc_predict_v2.proto), served by a grpc.aio server started with the gateway (grpc_server.py);
- the Open Inference Protocol v2 over REST (oip_rest.py), sharing its transport-agnostic core (oip.py) with gRPC.
"""
