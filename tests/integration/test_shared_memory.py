"""System shared memory with the official tritonclient and its shared_memory utilities (HTTP and gRPC)."""

from __future__ import annotations

import itertools
import os
import subprocess
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from .triton_helpers import Triton, connect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SIZE = 16 * 4  # one [1, 16] INT32 tensor of the "simple" model
_counter = itertools.count()


@pytest.fixture(params=["http", "grpc"])
def triton(request, server) -> Triton:
    return connect(request.param, server)


class Regions:
    """Shared memory objects made with tritonclient's utilities, registered under unique names."""

    def __init__(self, triton: Triton) -> None:
        self.triton = triton
        self.handles: list = []
        self.prefix = f"t{uuid.uuid4().hex[:8]}_{triton.protocol}"

    def create(self, size: int) -> tuple[str, str, object]:
        name = f"{self.prefix}_{next(_counter)}"
        handle = shm.create_shared_memory_region(name, f"/{name}", size)
        self.handles.append(handle)
        return name, f"/{name}", handle

    def register(self, size: int, offset: int = 0, byte_size: int | None = None) -> tuple[str, object]:
        name, key, handle = self.create(size)
        self.triton.client.register_system_shared_memory(
            name, key, size - offset if byte_size is None else byte_size, offset=offset
        )
        return name, handle

    def close(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions(triton: Triton) -> Iterator[Regions]:
    made = Regions(triton)
    yield made
    triton.client.unregister_system_shared_memory()
    made.close()


def status_names(triton: Triton, name: str = "") -> dict[str, dict]:
    status = (
        triton.client.get_system_shared_memory_status(name, as_json=True)
        if triton.protocol == "grpc"
        else (triton.client.get_system_shared_memory_status(name))
    )
    if triton.protocol == "grpc":
        return {
            k: {**v, "offset": int(v.get("offset", 0)), "byte_size": int(v["byte_size"])}
            for k, v in status.get("regions", {}).items()
        }
    return {row["name"]: row for row in status}


def shm_request(triton: Triton, region: str, offsets: tuple[int, int], out_region: str, out_offsets: tuple[int, int]):
    inputs = [triton.module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor, offset in zip(inputs, offsets, strict=True):
        tensor.set_shared_memory(region, SIZE, offset=offset)
    outputs = [triton.module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    for tensor, offset in zip(outputs, out_offsets, strict=True):
        tensor.set_shared_memory(out_region, SIZE, offset=offset)
    return inputs, outputs


def expect(triton: Triton, code: dict[str, str], fragment: str, call, *args, **kwargs) -> str:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    assert str(info.value.status()) == code[triton.protocol], (info.value.status(), info.value.message())
    assert fragment in info.value.message(), info.value.message()
    return info.value.message()


INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
NOT_FOUND = {"http": "404", "grpc": "StatusCode.NOT_FOUND"}
EXISTS = {"http": "409", "grpc": "StatusCode.ALREADY_EXISTS"}
UNIMPLEMENTED = {"http": "501", "grpc": "StatusCode.UNIMPLEMENTED"}


def test_server_metadata_lists_the_extension(triton: Triton) -> None:
    meta = triton.client.get_server_metadata()
    extensions = list(meta.extensions) if triton.protocol == "grpc" else meta["extensions"]
    assert "system_shared_memory" in extensions
    assert "cuda_shared_memory" not in extensions


def test_inputs_and_outputs_through_shared_memory(triton: Triton, regions: Regions) -> None:
    in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    in1 = np.full((1, 16), 5, dtype=np.int32)
    # One input region holding both tensors after 8 bytes of padding; one output region with both outputs.
    in_name, in_handle = regions.register(8 + 2 * SIZE)
    shm.set_shared_memory_region(in_handle, [in0, in1], offset=8)
    out_name, out_handle = regions.register(2 * SIZE)
    assert set(status_names(triton)) == {in_name, out_name}
    one = status_names(triton, in_name)[in_name]
    assert (one["key"], one["byte_size"]) == (f"/{in_name}", 8 + 2 * SIZE)

    inputs, outputs = shm_request(triton, in_name, (8, 8 + SIZE), out_name, (0, SIZE))
    result = triton.client.infer("simple", inputs, outputs=outputs)

    for index, name in enumerate(("OUTPUT0", "OUTPUT1")):
        output = result.get_output(name)
        if triton.protocol == "grpc":  # gRPC says where the output went; REST only describes it
            params = {k: v.string_param or v.int64_param for k, v in output.parameters.items()}
            assert params == {"shared_memory_region": out_name, "shared_memory_byte_size": SIZE} | (
                {"shared_memory_offset": SIZE} if index else {}
            )
            shape = list(output.shape)
        else:
            assert "data" not in output and "parameters" not in output
            shape = output["shape"]
        got = shm.get_contents_as_numpy(out_handle, np.int32, shape, offset=index * SIZE)
        np.testing.assert_array_equal(got, in0 + in1 if name == "OUTPUT0" else in0 - in1)


def test_shared_memory_input_with_output_in_response(triton: Triton, regions: Regions) -> None:
    """Inputs from shared memory, outputs in the response as usual, and a BYTES-free mix of both."""
    in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    in1 = np.full((1, 16), 2, dtype=np.int32)
    name, handle = regions.register(SIZE)
    shm.set_shared_memory_region(handle, [in0])
    first = triton.module.InferInput("INPUT0", [1, 16], "INT32")
    first.set_shared_memory(name, SIZE)
    second = triton.inputs({"INPUT1": in1})[0]
    result = triton.client.infer("simple", [first, second], outputs=triton.outputs(["OUTPUT1"]))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), in0 - in1)


def test_register_checks_key_and_bounds(triton: Triton, regions: Regions) -> None:
    client = triton.client
    expect(
        triton,
        INVALID,
        "Unable to open shared memory region: '/ferry_no_such_key'",
        client.register_system_shared_memory,
        "nokey",
        "/ferry_no_such_key",
        64,
    )
    expect(
        triton,
        INVALID,
        "cannot register shared memory region 'badkey' - invalid shm key '/a/b'",
        client.register_system_shared_memory,
        "badkey",
        "/a/b",
        64,
    )
    expect(
        triton,
        INVALID,
        "with key '/triton_python_backend_shm_region_x' as the key contains the reserved prefix",
        client.register_system_shared_memory,
        "reserved",
        "/triton_python_backend_shm_region_x",
        64,
    )
    name, key, _ = regions.create(SIZE)
    expect(
        triton,
        INVALID,
        "failed to register shared memory region '" + name + "': invalid args",
        client.register_system_shared_memory,
        name,
        key,
        SIZE,
        offset=8,
    )
    client.register_system_shared_memory(name, key, SIZE)
    expect(
        triton,
        EXISTS,
        f"shared memory region '{name}' already in manager",
        client.register_system_shared_memory,
        name,
        key,
        SIZE,
    )
    expect(
        triton,
        NOT_FOUND,
        "Unable to find system shared memory region: ",
        client.get_system_shared_memory_status,
        "nothing",
    )
    client.unregister_system_shared_memory("nothing")  # unknown names are not an error, as in Triton


def test_infer_checks_regions_and_sizes(triton: Triton, regions: Regions) -> None:
    client = triton.client
    in_name, _ = regions.register(2 * SIZE)
    out_name, _ = regions.register(2 * SIZE)
    small, _ = regions.register(SIZE // 2)

    inputs, outputs = shm_request(triton, "no_such_region", (0, SIZE), out_name, (0, SIZE))
    expect(
        triton,
        INVALID,
        "Unable to find shared memory region: 'no_such_region'",
        client.infer,
        "simple",
        inputs,
        outputs=outputs,
    )
    inputs, outputs = shm_request(triton, in_name, (0, SIZE + 8), out_name, (0, SIZE))
    expect(
        triton,
        INVALID,
        "Invalid offset + byte size for shared memory region: '" + in_name + "'",
        client.infer,
        "simple",
        inputs,
        outputs=outputs,
    )
    inputs, outputs = shm_request(triton, in_name, (2 * SIZE, 0), out_name, (0, SIZE))
    expect(
        triton,
        INVALID,
        f"Invalid offset for shared memory region: '{in_name}'",
        client.infer,
        "simple",
        inputs,
        outputs=outputs,
    )
    inputs, outputs = shm_request(triton, in_name, (0, SIZE), small, (0, 0))
    for tensor in outputs:
        tensor.set_shared_memory(small, SIZE // 2)
    expect(
        triton,
        INVALID,
        "needs 64 bytes but its shared memory byte size is 32",
        client.infer,
        "simple",
        inputs,
        outputs=outputs,
    )
    wrong = triton.module.InferInput("INPUT0", [1, 16], "INT32")
    wrong.set_shared_memory(small, SIZE // 2)
    expect(
        triton,
        INVALID,
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 32",
        client.infer,
        "simple",
        [wrong, *triton.inputs({"INPUT1": np.zeros((1, 16), np.int32)})],
    )

    client.unregister_system_shared_memory(in_name)
    assert in_name not in status_names(triton)
    inputs, outputs = shm_request(triton, in_name, (0, SIZE), out_name, (0, SIZE))
    expect(
        triton,
        INVALID,
        f"Unable to find shared memory region: '{in_name}'",
        client.infer,
        "simple",
        inputs,
        outputs=outputs,
    )


def test_cuda_shared_memory_answers_as_triton_without_gpus(triton: Triton) -> None:
    """Status is empty and unregistering succeeds (every example cleans up with these calls);
    registering a CUDA region is refused naming what is missing."""
    client = triton.client
    status = client.get_cuda_shared_memory_status()
    assert (list(status.regions) if triton.protocol == "grpc" else status) == []
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")
    expect(
        triton, NOT_FOUND, "unable to find cuda shared memory region 'gpu'", client.get_cuda_shared_memory_status, "gpu"
    )
    call = (client.register_cuda_shared_memory, "gpu", b"\0" * 64, 0, 64)
    expect(triton, UNIMPLEMENTED, "cannot register CUDA shared memory region 'gpu': this server has no CUDA IPC", *call)
    assert client.is_server_live()


@pytest.mark.skipif(
    not os.environ.get("FERRY_PERF_ANALYZER"),
    reason="set FERRY_PERF_ANALYZER to a perf_analyzer binary (tritonclient==2.41.1 wheel; see shared notes)",
)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_with_system_shared_memory(server, protocol: str) -> None:
    """perf_analyzer registers its regions, sends every request through them, and cleans up."""
    url = server.http_url if protocol == "http" else server.grpc_url
    command = [
        os.environ["FERRY_PERF_ANALYZER"],
        *("-m", "simple", "-u", url, "-i", protocol, "-b", "1", "--concurrency-range", "1"),
        *("--shared-memory", "system", "--output-shared-memory-size", str(SIZE)),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "50", "-s", "100"),
    ]
    before = connect("http", server).client.get_inference_statistics("simple")["model_stats"][0]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr
    assert "Concurrency: 1, throughput:" in done.stdout
    after = connect("http", server).client.get_inference_statistics("simple")["model_stats"][0]
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] >= 150
    assert status_names(connect(protocol, server)) == {}  # perf_analyzer unregistered its regions


def _cuda_shared_memory_utilities():
    """tritonclient's CUDA shared memory helpers where a GPU and their bindings exist, else None."""
    try:
        import torch
        import tritonclient.utils.cuda_shared_memory as cudashm
    except Exception:
        return None
    return cudashm if torch.cuda.is_available() else None


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.skipif(_cuda_shared_memory_utilities() is None, reason="needs CUDA, torch and tritonclient[cuda]")
def test_cuda_shared_memory_regions_carry_inputs_and_outputs(triton: Triton) -> None:
    """As Triton's cuda shared memory example: inputs written to a device allocation, outputs read
    back from another; the status lists both with their device; the names, identity and cap rules
    are system shared memory's (a name taken by either kind is refused)."""
    cudashm = _cuda_shared_memory_utilities()
    client = triton.client
    prefix = f"c{uuid.uuid4().hex[:8]}_{triton.protocol}"
    inputs_handle = cudashm.create_shared_memory_region(f"{prefix}_in", 2 * SIZE, 0)
    outputs_handle = cudashm.create_shared_memory_region(f"{prefix}_out", 2 * SIZE, 0)
    try:
        first, second = np.arange(16, dtype=np.int32)[None], np.full((1, 16), 3, dtype=np.int32)
        cudashm.set_shared_memory_region(inputs_handle, [first, second])
        client.register_cuda_shared_memory(f"{prefix}_in", cudashm.get_raw_handle(inputs_handle), 0, 2 * SIZE)
        client.register_cuda_shared_memory(f"{prefix}_out", cudashm.get_raw_handle(outputs_handle), 0, 2 * SIZE)
        status = client.get_cuda_shared_memory_status()
        names = list(status.regions) if triton.protocol == "grpc" else [row["name"] for row in status]
        assert sorted(names) == [f"{prefix}_in", f"{prefix}_out"]
        expect(
            triton,
            EXISTS,
            "already in manager",
            client.register_cuda_shared_memory,
            f"{prefix}_in",
            cudashm.get_raw_handle(inputs_handle),
            0,
            2 * SIZE,
        )
        too_large = (f"{prefix}_big", cudashm.get_raw_handle(outputs_handle), 0, 64 << 20)
        expect(triton, INVALID, "exceeds the", client.register_cuda_shared_memory, *too_large)
        inputs, outputs = shm_request(triton, f"{prefix}_in", (0, SIZE), f"{prefix}_out", (0, SIZE))
        client.infer("simple", inputs, outputs=outputs)
        total = cudashm.get_contents_as_numpy(outputs_handle, np.int32, [1, 16])
        np.testing.assert_array_equal(total, first + second)
        client.unregister_cuda_shared_memory()
        assert (list(client.get_cuda_shared_memory_status().regions) if triton.protocol == "grpc" else []) == []
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(inputs_handle)
        cudashm.destroy_shared_memory_region(outputs_handle)
