"""Front doors (REST and gRPC) over one protocol-neutral data plane."""
