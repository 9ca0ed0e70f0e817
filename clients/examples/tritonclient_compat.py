"""NVIDIA's own tritonclient works against Ferry unchanged (pip install 'tritonclient[http,grpc]').

python tritonclient_compat.py [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001]
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", default="127.0.0.1:8000")
    parser.add_argument("--grpc", default="127.0.0.1:8001")
    args = parser.parse_args()

    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for module, url in ((httpclient, args.http), (grpcclient, args.grpc)):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        result = client.infer("simple", inputs, outputs=[module.InferRequestedOutput("OUTPUT0")])
        assert (result.as_numpy("OUTPUT0") == 2 * data).all()
        print(module.__name__, "->", result.as_numpy("OUTPUT0").tolist())


if __name__ == "__main__":
    main()
