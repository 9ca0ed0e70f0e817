"""Ferry's synchronous HTTP client: health, metadata, tensor inference, images.

python http_client.py [--url 127.0.0.1:8000] DIGIT.png SCENE.png
"""

from __future__ import annotations

import argparse

import numpy as np

from ferry_client import HttpClient, InvalidArgumentError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8000")
    parser.add_argument("digit")
    parser.add_argument("scene")
    args = parser.parse_args()

    # retries: extra attempts on 503 (overload / not ready) with jittered backoff
    with HttpClient(args.url, timeout=30, retries=3) as client:
        print("ready:", client.is_server_ready(), "| simple ready:", client.is_model_ready("simple"))
        print("inputs of simple:", client.model_metadata("simple")["inputs"])

        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.int32)
        result = client.infer("simple", {"INPUT0": a, "INPUT1": b})  # binary tensors by default
        assert (result["OUTPUT0"] == a + b).all() and (result["OUTPUT1"] == a - b).all()
        print("OUTPUT0:", result["OUTPUT0"].tolist())

        top = client.classify("digits", args.digit, top_k=3)  # a path, bytes or a PIL image
        print("digit:", [(c.label, round(c.score, 4)) for c in top])
        for box in client.detect("digit_detector", args.scene, score_threshold=0.5):
            print(f"found {box.label} at {[round(v) for v in box.box]} ({box.score:.2f})")

        try:
            client.infer("simple", {"INPUT0": a})  # a missing input: the server says which
        except InvalidArgumentError as error:
            print("expected error:", error)


if __name__ == "__main__":
    main()
