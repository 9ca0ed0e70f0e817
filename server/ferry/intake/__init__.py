"""Several intake processes in front of the model process: hand-off, forwarding, supervision."""
