"""Ferry's synchronous gRPC client: the same calls as the HTTP client, over HTTP/2.

python grpc_client.py [--url 127.0.0.1:8001]
"""

from __future__ import annotations

import argparse

import numpy as np

from ferry_client import GrpcClient, NotFoundError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001")
    args = parser.parse_args()

    with GrpcClient(args.url, timeout=30, retries=3) as client:
        print("live:", client.is_server_live(), "| extensions:", client.server_metadata()["extensions"])
        print("max_batch_size of simple:", client.model_config("simple")["max_batch_size"])

        batch = np.random.default_rng(0).integers(0, 100, size=(4, 16), dtype=np.int32)
        result = client.infer("simple", {"INPUT0": batch, "INPUT1": batch}, outputs=["OUTPUT0"])
        assert (result["OUTPUT0"] == 2 * batch).all()
        print("batch of 4 ->", result)

        # classification extension: top-2 classes of each output row, as "score:index:label"
        logits = client.infer("digits", {"input": np.zeros((1, 1, 28, 28), np.float32)}, classification={"logits": 2})
        print("top-2 of a blank image:", [v.decode() for v in logits["logits"].ravel()])

        stats = client.model_statistics("simple")["model_stats"][0]
        print("simple served", stats["inference_count"], "inferences in", stats["execution_count"], "executions")
        try:
            client.model_metadata("no_such_model")
        except NotFoundError as error:
            print("expected error:", error)


if __name__ == "__main__":
    main()
