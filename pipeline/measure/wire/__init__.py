"""The wire clients of the load generator: HTTP/1.1 (`http_client`), HTTP/2 + HPACK + unary
gRPC (`h2_session`, `hpack`, `grpc_client`, `grpc_status`), blocking callers for low
concurrency (`blocking`), and the `Transport` that picks one for a request (`transport`). The
requests they send are `pipeline/request_types.py`, a floor below, since the server kinds
render them too."""
