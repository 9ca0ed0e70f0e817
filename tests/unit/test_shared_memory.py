"""The shared memory registry on real files in a temporary directory (standing in for /dev/shm):
windows, bounds, owners, and objects that shrink, move or belong to someone else."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from ferry.api.shared_memory import SharedMemoryRegistry, tensor_ref
from ferry.errors import ErrorKind, FerryError, InvalidArgument, NotFound
from ferry.types import SharedMemoryRef

A, B = "token:a", "token:b"


@pytest.fixture
def registry(tmp_path: Path) -> SharedMemoryRegistry:
    (tmp_path / "obj").write_bytes(bytes(range(256)))
    return SharedMemoryRegistry(root=tmp_path, max_regions=8, max_regions_per_owner=3)


def test_reads_and_writes_are_relative_to_the_registered_window(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    registry.register(A, "r", "/obj", 16, 64)
    assert bytes(registry.read(A, SharedMemoryRef("r", 4, 4), "x")) == bytes([20, 21, 22, 23])
    assert registry.write(A, SharedMemoryRef("r", 0, 8), "y", b"\xff" * 3) == 3
    assert (tmp_path / "obj").read_bytes()[15:20] == bytes([15, 255, 255, 255, 19])
    assert registry.status(A) == [{"name": "r", "key": "/obj", "offset": 16, "byte_size": 64}]


def test_register_validates_key_window_and_name(registry: SharedMemoryRegistry) -> None:
    with pytest.raises(
        InvalidArgument, match="failed to register shared memory region 'r': invalid args: .*exceeds the 256 bytes"
    ):
        registry.register(A, "r", "obj", 200, 57)
    with pytest.raises(InvalidArgument, match="Unable to open shared memory region: '/missing'"):
        registry.register(A, "r", "/missing", 0, 1)
    for key in ("", "/", "/a/b", "/..", "/.", "/o\x00bj", "/o bj", "/" + "k" * 256, "/\u00e9"):
        with pytest.raises(InvalidArgument, match="cannot register shared memory region 'r' - invalid shm key"):
            registry.register(A, "r", key, 0, 1)
    for name in ("", "a\x00b", "a/b", "line\nbreak", "n" * 256):
        with pytest.raises(InvalidArgument, match="region"):
            registry.register(A, name, "/obj", 0, 1)
    with pytest.raises(InvalidArgument, match="byte_size must be greater than 0"):
        registry.register(A, "r", "/obj", 0, 0)
    registry.register(A, "r", "obj", 200, 56)  # exactly to the end
    with pytest.raises(FerryError, match="shared memory region 'r' already in manager") as info:
        registry.register(A, "r", "/obj", 0, 1)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS


def test_bounds_are_checked_per_tensor(registry: SharedMemoryRegistry) -> None:
    registry.register(A, "r", "/obj", 0, 32)
    with pytest.raises(InvalidArgument, match="Invalid offset \\+ byte size for shared memory region: 'r'"):
        registry.read(A, SharedMemoryRef("r", 30, 4), "x")
    with pytest.raises(InvalidArgument, match="needs 8 bytes but its shared memory byte size is 4"):
        registry.write(A, SharedMemoryRef("r", 0, 4), "y", b"12345678")
    with pytest.raises(InvalidArgument, match="Unable to find shared memory region: 'other'"):
        registry.read(A, SharedMemoryRef("other", 0, 4), "x")
    with pytest.raises(NotFound):
        registry.status(A, "other")


def test_a_shrunk_object_is_an_invalid_argument_not_a_fault(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    registry.register(A, "r", "/obj", 0, 256)
    os.truncate(tmp_path / "obj", 0)  # what the client may do at any time
    with pytest.raises(InvalidArgument, match="has been shrunk"):
        registry.read(A, SharedMemoryRef("r", 0, 64), "x")
    with pytest.raises(InvalidArgument, match="has been shrunk"):
        registry.write(A, SharedMemoryRef("r", 0, 64), "y", b"\x01" * 64)
    assert (tmp_path / "obj").stat().st_size == 0  # the refused write did not grow it back


def test_regions_belong_to_the_identity_that_registered_them(registry: SharedMemoryRegistry) -> None:
    registry.register(A, "r", "/obj", 0, 8)
    assert registry.status(B) == []
    with pytest.raises(NotFound):
        registry.status(B, "r")
    with pytest.raises(InvalidArgument, match="Unable to find shared memory region"):
        registry.read(B, SharedMemoryRef("r", 0, 8), "x")
    registry.unregister(B, "r")  # as for any unknown name: nothing happens to A's region
    registry.unregister(B)
    assert [s["name"] for s in registry.status(A)] == ["r"]
    registry.register(B, "r", "/obj", 8, 8)  # the same name is B's own region
    assert bytes(registry.read(B, SharedMemoryRef("r", 0, 1), "x")) == bytes([8])
    assert bytes(registry.read(A, SharedMemoryRef("r", 0, 1), "x")) == bytes([0])


def test_regions_are_capped_per_identity_and_in_total(tmp_path: Path) -> None:
    (tmp_path / "obj").write_bytes(bytes(64))
    registry = SharedMemoryRegistry(root=tmp_path, max_regions=4, max_regions_per_owner=3)
    for index in range(3):
        registry.register(A, f"r{index}", "/obj", 0, 8)
    with pytest.raises(FerryError, match="limit per client") as info:
        registry.register(A, "r3", "/obj", 0, 8)
    assert info.value.kind is ErrorKind.RESOURCE_EXHAUSTED
    registry.register(B, "r0", "/obj", 0, 8)
    with pytest.raises(FerryError, match="--shared-memory-max-regions") as info:
        registry.register(B, "r1", "/obj", 0, 8)
    assert info.value.kind is ErrorKind.RESOURCE_EXHAUSTED
    registry.unregister(A)
    registry.register(B, "r1", "/obj", 0, 8)
    assert registry.count() == 2


def test_links_other_owners_and_non_regular_objects_are_refused(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 64)
    (tmp_path / "link").symlink_to(secret)
    with pytest.raises(InvalidArgument, match="symbolic link"):
        registry.register(A, "r", "/link", 0, 8)
    (tmp_path / "dir").mkdir()
    with pytest.raises(InvalidArgument, match="Is a directory"):
        registry.register(A, "r", "/dir", 0, 8)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InvalidArgument, match="not a regular object"):
        registry.register(A, "r", "/fifo", 0, 8)
    strict = SharedMemoryRegistry(root=tmp_path, owner_uids=frozenset({os.geteuid() + 1}))
    with pytest.raises(InvalidArgument, match="owned by a user this server does not accept"):
        strict.register(A, "r", "/obj", 0, 8)
    assert registry.count() == 0 and strict.count() == 0


def test_a_disabled_registry_answers_as_triton_with_client_shm_off(tmp_path: Path) -> None:
    """Status is empty; everything else is UNIMPLEMENTED (not retried) with Triton's words and the flag."""
    (tmp_path / "obj").write_bytes(bytes(64))
    registry = SharedMemoryRegistry(root=tmp_path, enabled=False)
    assert registry.status(A) == []
    for call in (
        lambda: registry.register(A, "r", "/obj", 0, 8),
        lambda: registry.unregister(A),
        lambda: registry.read(A, SharedMemoryRef("r", 0, 8), "x"),
    ):
        with pytest.raises(FerryError, match="^Client shared memory is disabled: .*--allow-shared-memory") as info:
            call()
        assert info.value.kind is ErrorKind.UNIMPLEMENTED


def test_unregister_while_a_read_holds_the_descriptor(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    """The descriptor stays open until the read that leased it ends, then closes (never reused early)."""
    registry.register(A, "r", "/obj", 0, 64)
    with registry._lease(A, SharedMemoryRef("r", 0, 8), "x") as region:
        registry.unregister(A, "r")
        assert [s["name"] for s in registry.status(A)] == ["r"]  # in use: listed until its user ends (Triton)
        assert os.pread(region.fd, 4, 0) == bytes([0, 1, 2, 3])  # still open for the running request
    with pytest.raises(OSError):
        os.fstat(region.fd)
    with pytest.raises(InvalidArgument, match="Unable to find shared memory region"):
        registry.read(A, SharedMemoryRef("r", 0, 8), "x")


def test_concurrent_reads_and_unregisters_never_fault(registry: SharedMemoryRegistry) -> None:
    errors: list[BaseException] = []

    def churn() -> None:
        for _ in range(300):
            with contextlib.suppress(FerryError):
                registry.register(A, "r", "/obj", 0, 256)
            registry.unregister(A, "r")

    def read() -> None:
        for _ in range(300):
            try:
                data = registry.read(A, SharedMemoryRef("r", 0, 256), "x")
                np.testing.assert_array_equal(np.frombuffer(data, np.uint8), np.arange(256, dtype=np.uint8))
            except InvalidArgument:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    threads = [threading.Thread(target=churn), threading.Thread(target=read), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    registry.close()


def test_tensor_parameters() -> None:
    assert tensor_ref("x", {"binary_data_size": 4}) is None
    assert tensor_ref("x", {"shared_memory_region": "r", "shared_memory_byte_size": 8}) == SharedMemoryRef("r", 0, 8)
    with pytest.raises(InvalidArgument, match="needs shared_memory_byte_size"):
        tensor_ref("x", {"shared_memory_region": "r"})
    with pytest.raises(InvalidArgument, match="shared_memory_offset given without shared_memory_region"):
        tensor_ref("x", {"shared_memory_offset": 4})
    with pytest.raises(InvalidArgument, match="must be a non-negative integer"):
        tensor_ref("x", {"shared_memory_region": "r", "shared_memory_byte_size": -1})


def test_a_held_region_outlives_unregister_until_its_requests_end(registry: SharedMemoryRegistry) -> None:
    """Triton's in-use rule: unregistering (one region or all) while requests hold a region keeps it
    listed and usable; the last request's end forgets it and closes its descriptor."""
    registry.register(A, "r", "/obj", 0, 64)
    registry.register(A, "s", "/obj", 64, 64)
    first = registry.hold(A, ["r", "s", "unknown"])
    second = registry.hold(A, ["r"])
    registry.unregister(A)
    assert [row["name"] for row in registry.status(A)] == ["r", "s"]
    assert bytes(registry.read(A, SharedMemoryRef("r", 0, 2), "x")) == bytes([0, 1])
    fd = registry._regions[(A, "r")].fd
    first()
    assert [row["name"] for row in registry.status(A)] == ["r"]  # "s" had no other user
    second()
    assert registry.status(A) == [] and registry.count() == 0
    with pytest.raises(OSError):
        os.fstat(fd)
    registry.register(A, "t", "/obj", 0, 8)
    release = registry.hold(A, ["t"])
    registry.unregister(A, "t")
    with pytest.raises(FerryError, match="'t' already in manager"):  # a held region keeps its name taken
        registry.register(A, "t", "/obj", 0, 8)
    release()
    registry.register(A, "t", "/obj", 0, 8)


def test_request_windows_are_checked_in_tritons_order_and_words(registry: SharedMemoryRegistry) -> None:
    registry.register(A, "r", "/obj", 0, 64)
    with pytest.raises(InvalidArgument, match="Invalid offset for shared memory region: 'r'"):
        registry.read(A, SharedMemoryRef("r", 64, 1), "x")
    with pytest.raises(
        InvalidArgument, match=r"Integer overflow detected: byte_size \(18446744073709551584\) \+ offset"
    ):
        registry.write(A, SharedMemoryRef("r", 32, 2**64 - 32), "y", b"1234")
    reserved = "/triton_python_backend_shm_region_x"
    with pytest.raises(InvalidArgument, match="as the key contains the reserved prefix"):
        registry.register(A, "p", reserved, 0, 8)


def test_a_mirror_opens_the_registered_object_and_knows_its_generation(
    registry: SharedMemoryRegistry, tmp_path: Path
) -> None:
    """An intake's mirror (``describe``, then ``register(..., mirrored=)``) reads the very object the
    registry checked, into memory it owns; a registration gone or made again is not ``current``."""
    registry.register(A, "r", "/obj", 16, 64)
    found = registry.describe(A, "r")
    assert (found["key"], found["offset"], found["byte_size"]) == ("/obj", 16, 64)
    mirror = SharedMemoryRegistry(root=tmp_path)
    mirror.register(
        A, "r", found["key"], found["offset"], found["byte_size"], (found["generation"], tuple(found["object"]))
    )
    target = bytearray(8)
    mirror.read_into(A, SharedMemoryRef("r", 4, 4), "x", memoryview(target))
    assert target == bytes([20, 21, 22, 23, 0, 0, 0, 0])
    with pytest.raises(NotFound):
        registry.describe(B, "r")  # another owner's
    assert registry.current(A, {"r": found["generation"]})
    registry.unregister(A, "r")
    with pytest.raises(NotFound):
        registry.describe(A, "r")
    registry.register(A, "r", "/obj", 16, 64)
    assert not registry.current(A, {"r": found["generation"]})  # registered again since
    assert registry.current(A, {"r": registry.describe(A, "r")["generation"]})

    (tmp_path / "obj").unlink()  # the key now names another object: never mirrored
    (tmp_path / "obj").write_bytes(bytes(256))
    mirror.unregister(A, "r")
    with pytest.raises(InvalidArgument, match="names another object by now"):
        mirror.register(A, "r", "/obj", 16, 64, (found["generation"], tuple(found["object"])))
    assert mirror.count() == 0
