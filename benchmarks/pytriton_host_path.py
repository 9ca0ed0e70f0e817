"""host_path.py's no-compute model served by PyTriton (Triton's C++ front end and dynamic batcher,
the model in Python), for a same-sitting comparison: run by the interpreter of a venv that has
``nvidia-pytriton`` (``host_path.py --pytriton PYTHON``), never imported by the benchmarks.

    python pytriton_host_path.py GRPC_PORT HTTP_PORT METRICS_PORT

Same I/O and batching as host_path.py's model: FP32 ``[3, 224, 224]`` in, the first 1000 values
of each image out (``[1000]``), ``max_batch_size`` 128, dynamic batching with no queue delay.
And model_repo's tiny ``simple`` (``host_path.py --tiny``): INT32 [16] sum and difference,
``max_batch_size`` 8, with dynamic batching, which host_path.py adds to its copy of the config
(without it PyTriton runs one request per execution of its Python model, ~3.5 ms each here).
"""

import sys

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig


@batch
def first_values(input):  # noqa: A002 (the model's input name)
    """What the ONNX model computes: a slice of 1000 values of each image, made contiguous."""
    return {"output": np.ascontiguousarray(input[:, 0:1, 0:5, 0:200].reshape(-1, 1000))}


@batch
def add_sub(INPUT0, INPUT1):  # noqa: N803 (the model's input names)
    """model_repo's ``simple``: the sum and the difference of two INT32 [16] tensors."""
    return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


def main() -> None:
    grpc_port, http_port, metrics_port = (int(value) for value in sys.argv[1:4])
    config = TritonConfig(
        grpc_address="127.0.0.1",
        http_address="127.0.0.1",
        grpc_port=grpc_port,
        http_port=http_port,
        metrics_port=metrics_port,
    )
    # the statistics (read by host_path.py) and shared memory (perf_analyzer's grpc-shm) unrestricted,
    # as Ferry serves them: the server listens on loopback only
    with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        triton.bind(
            model_name="host_path",
            infer_func=first_values,
            inputs=[Tensor(name="input", dtype=np.float32, shape=(3, 224, 224))],
            outputs=[Tensor(name="output", dtype=np.float32, shape=(1000,))],
            config=ModelConfig(max_batch_size=128, batcher=DynamicBatcher()),
            strict=False,
        )
        pair = [Tensor(name=name, dtype=np.int32, shape=(16,)) for name in ("INPUT0", "INPUT1")]
        triton.bind(
            model_name="simple",
            infer_func=add_sub,
            inputs=pair,
            outputs=[Tensor(name=name, dtype=np.int32, shape=(16,)) for name in ("OUTPUT0", "OUTPUT1")],
            config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher()),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
