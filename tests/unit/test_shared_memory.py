"""The shared memory registry on real mappings of files in a temporary directory (as /dev/shm)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ferry.api.shared_memory import SharedMemoryRegistry, tensor_ref
from ferry.errors import ErrorKind, FerryError, InvalidArgument, NotFound
from ferry.types import SharedMemoryRef


@pytest.fixture
def registry(tmp_path: Path) -> SharedMemoryRegistry:
    (tmp_path / "obj").write_bytes(bytes(range(256)))
    return SharedMemoryRegistry(root=tmp_path)


def test_views_and_writes_are_relative_to_the_registered_window(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    registry.register("r", "/obj", 16, 64)
    assert bytes(registry.view(SharedMemoryRef("r", 4, 4), "x")) == bytes([20, 21, 22, 23])
    assert registry.write(SharedMemoryRef("r", 0, 8), "y", b"\xff" * 3) == 3
    assert (tmp_path / "obj").read_bytes()[15:20] == bytes([15, 255, 255, 255, 19])
    assert registry.status() == [{"name": "r", "key": "/obj", "offset": 16, "byte_size": 64}]


def test_register_validates_key_window_and_name(registry: SharedMemoryRegistry) -> None:
    with pytest.raises(InvalidArgument, match="exceeds the 256 bytes"):
        registry.register("r", "obj", 200, 57)
    with pytest.raises(InvalidArgument, match="cannot open"):
        registry.register("r", "/missing", 0, 1)
    for key in ("", "/", "/a/b", "/.."):
        with pytest.raises(InvalidArgument, match="not a shared memory object name"):
            registry.register("r", key, 0, 1)
    with pytest.raises(InvalidArgument, match="byte_size must be greater than 0"):
        registry.register("r", "/obj", 0, 0)
    registry.register("r", "obj", 200, 56)  # exactly to the end
    with pytest.raises(FerryError, match="already registered") as info:
        registry.register("r", "/obj", 0, 1)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS


def test_bounds_are_checked_per_tensor(registry: SharedMemoryRegistry) -> None:
    registry.register("r", "/obj", 0, 32)
    with pytest.raises(InvalidArgument, match="offset 30 \\+ byte size 4 is outside region 'r' of 32 bytes"):
        registry.view(SharedMemoryRef("r", 30, 4), "x")
    with pytest.raises(InvalidArgument, match="needs 8 bytes but its shared memory byte size is 4"):
        registry.write(SharedMemoryRef("r", 0, 4), "y", b"12345678")
    with pytest.raises(InvalidArgument, match="unable to find system shared memory region 'other'"):
        registry.view(SharedMemoryRef("other", 0, 4), "x")
    with pytest.raises(NotFound):
        registry.status("other")


def test_unregister_while_a_request_holds_a_view(registry: SharedMemoryRegistry) -> None:
    """A running request keeps reading valid memory; the name is free again at once."""
    registry.register("r", "/obj", 0, 64)
    held = np.frombuffer(registry.view(SharedMemoryRef("r", 0, 8), "x"), dtype=np.uint8)
    registry.unregister("r")
    assert registry.status() == []
    with pytest.raises(InvalidArgument, match="unable to find"):
        registry.view(SharedMemoryRef("r", 0, 8), "x")
    np.testing.assert_array_equal(held, np.arange(8, dtype=np.uint8))  # still mapped
    registry.register("r", "/obj", 8, 8)
    assert bytes(registry.view(SharedMemoryRef("r", 0, 1), "x")) == bytes([8])
    registry.unregister()
    assert registry.status() == []


def test_tensor_parameters() -> None:
    assert tensor_ref("x", {"binary_data_size": 4}) is None
    assert tensor_ref("x", {"shared_memory_region": "r", "shared_memory_byte_size": 8}) == SharedMemoryRef("r", 0, 8)
    with pytest.raises(InvalidArgument, match="needs shared_memory_byte_size"):
        tensor_ref("x", {"shared_memory_region": "r"})
    with pytest.raises(InvalidArgument, match="shared_memory_offset given without shared_memory_region"):
        tensor_ref("x", {"shared_memory_offset": 4})
    with pytest.raises(InvalidArgument, match="must be a non-negative integer"):
        tensor_ref("x", {"shared_memory_region": "r", "shared_memory_byte_size": -1})
