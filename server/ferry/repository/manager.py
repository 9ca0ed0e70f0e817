"""The model lifecycle: which versions are LOADING, READY, UNLOADING or UNAVAILABLE, and why.

Loads run in worker threads so the server keeps answering; a reloaded version replaces the old
one only once it is READY, and the old one drains its queue before it is closed, so reloads never
drop requests. A model that fails to load is recorded with its reason and harms nothing else.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ferry_client.protocol import model_config_pb2 as mc

from ..ensembles.plan import is_ensemble
from ..ensembles.step import Outputs, StepPath, StepRequest
from ..errors import FerryError, InvalidArgument, ModelLoadError, NotFound, Unavailable
from ..ocr import is_ocr
from ..paths import check_model_name, model_directory
from ..types import ControlMode
from ..workers import Workers
from .config import CONFIG_FILENAME, parse_config_json, read_config_file
from .ensemble_loader import load_ensemble
from .memory import release_free_memory
from .model import ModelVersion, load_version
from .ocr_loader import load_ocr
from .validation import validate_model_config
from .versions import select_versions, versions_on_disk

log = logging.getLogger(__name__)


class LoadChain:
    """What a composite model's loader (ensemble, OCR) sees of the manager: its composing models
    are loaded with the chain of loads that led to it, so a cycle is refused by name."""

    def __init__(self, manager: ModelManager, chain: tuple[str, ...]) -> None:
        self.manager = manager
        self.chain = chain  # the models whose loads led here, outermost first
        self.workers = manager.workers

    async def ensure_loaded(self, name: str) -> None:
        await self.manager.ensure_loaded(name, self.chain)

    def get(self, name: str, version: str = "") -> ModelVersion:
        return self.manager.get(name, version)

    @property
    def step_path(self) -> StepPath:
        """The request path's, read when a step is served (the path is set after the manager is made)."""
        return self.manager.step_path


class ModelState(str, enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class VersionStatus:
    state: ModelState
    reason: str = ""
    model: ModelVersion | None = None


@dataclass
class ModelRecord:
    name: str
    versions: dict[int, VersionStatus] = field(default_factory=dict)
    error: str = ""  # a failure before any version could be tried (e.g. a config typo)
    fingerprint: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _fingerprint(model_dir: Path) -> str:
    """Changes to any file of a model (config, labels, version files) change this digest."""
    try:
        model_directory(model_dir.parent, model_dir.name)
    except FerryError as exc:  # never walk a tree outside the repository (a symlink to / would be costly)
        return f"unusable: {exc.message}"
    digest = hashlib.sha256()
    try:
        for path in sorted(model_dir.rglob("*")):
            if path.is_file() and "trt_cache" not in path.parts:
                stat = path.stat()
                digest.update(f"{path.relative_to(model_dir)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    except OSError as exc:  # unreadable now; a fix (chmod) changes this value, so the next poll retries
        return f"unreadable: {exc.strerror or exc}"
    return digest.hexdigest()


class ModelManager:
    """Owns every model version of one repository and answers "which model serves this request"."""

    def __init__(
        self,
        repository: Path,
        control_mode: ControlMode = ControlMode.NONE,
        startup_models: Iterable[str] = (),
        poll_interval: float = 15.0,
        on_loaded: Callable[[ModelVersion], None] | None = None,
        workers: Workers | None = None,
    ) -> None:
        self.repository = repository.resolve()
        #: the process's thread pools: its models' requests use them (an OCR model's page steps)
        self.workers = workers or Workers()
        self.control_mode = control_mode
        self.startup_models = list(startup_models)
        self.poll_interval = poll_interval
        self.on_loaded = on_loaded
        self._records: dict[str, ModelRecord] = {}
        #: The models strict readiness waits for (None: the repository as it is now, in poll mode).
        self._named: set[str] | None = None
        self._poll_task: asyncio.Task | None = None
        self._closing = False
        #: Which model's load waits for which other model's load (ensembles loading their steps):
        #: two start-up loads that wait for each other would otherwise hold each other's lock forever.
        self._waits_for: dict[str, str] = {}
        #: How an ensemble's or OCR model's steps are served: the request path plugs its own entry in here
        #: (``inference.path.RequestPath``), so every step is an ordinary request of this process.
        self.step_path: StepPath = _no_request_path

    # --- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        """Load the models the control mode asks for at start-up, then start polling if asked."""
        if not self.repository.is_dir():
            raise FerryError(f"model repository {self.repository} is not a directory")
        if self.control_mode == ControlMode.EXPLICIT and "*" not in self.startup_models:
            names = self.startup_models
        else:
            names = self.scan()
        if self.control_mode != ControlMode.POLL:
            self._named = set(names)
        ensembles = [name for name in names if self._names_ensemble(name)]
        await asyncio.gather(*(self._load_logged(name) for name in names if name not in ensembles))
        await asyncio.gather(*(self._load_logged(name) for name in ensembles))  # their steps are loaded now
        if self.control_mode == ControlMode.POLL:
            self._poll_task = asyncio.create_task(self._poll_forever(), name="repository-poll")

    async def stop(self, timeout: float | None = None) -> None:
        """Stop polling, drain every scheduler and close every instance.

        Ensembles drain first, so a request inside one still finds its later steps' models open."""
        self._closing = True
        if self._poll_task:
            self._poll_task.cancel()
        loaded = [s for record in self._records.values() for s in record.versions.values() if s.model is not None]
        for ensembles in (True, False):
            await asyncio.gather(
                *(self._retire(s, timeout) for s in loaded if bool(s.model and s.model.composing_models) == ensembles)
            )

    def hurry(self) -> None:
        """Tell every loaded model's batcher that the server is draining (see ``ModelScheduler.hurry``)."""
        for record in self._records.values():
            for status in record.versions.values():
                if status.model is not None:
                    status.model.scheduler.hurry()

    def _names_ensemble(self, name: str) -> bool:
        try:
            config = read_config_file(model_directory(self.repository, name))
        except (FerryError, OSError):  # OSError: an unreadable directory or file
            return False  # the load reports the error
        return config is not None and (is_ensemble(config) or is_ocr(config))

    def scan(self) -> list[str]:
        """Model directories in the repository (hidden and ``_``-prefixed ones are skipped).

        A repository that cannot be listed (removed, unmounted, permissions) is UNAVAILABLE for the
        caller, with the reason but not the server's path; the log names the path."""
        try:
            return sorted(
                entry.name
                for entry in self.repository.iterdir()
                if entry.is_dir() and not entry.name.startswith((".", "_"))
            )
        except OSError as exc:
            log.warning("cannot list the model repository %s: %s", self.repository, exc)
            raise Unavailable(
                f"the model repository cannot be read ({exc.strerror or type(exc).__name__}); "
                "the server log names the path"
            ) from None

    # --- queries ----------------------------------------------------------------------------

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model and version with its state and reason, as the repository index reports it."""
        rows: list[dict[str, str]] = []
        names = set(self._records) | set(self.scan())
        for name in sorted(names):
            record = self._records.get(name)
            if record is None or (not record.versions and not record.error):
                if not ready_only:
                    rows.append({"name": name})
                continue
            if record.error and not record.versions:
                if not ready_only:
                    rows.append(
                        {"name": name, "version": "", "state": ModelState.UNAVAILABLE.value, "reason": record.error}
                    )
                continue
            for version, status in sorted(record.versions.items()):
                state, reason = status.state, status.reason
                if state == ModelState.READY and status.model is not None:
                    unready = status.model.unready_reason()
                    reason, state = (unready, ModelState.UNAVAILABLE) if unready else (reason, state)
                if ready_only and state != ModelState.READY:
                    continue
                rows.append({"name": name, "version": str(version), "state": state.value, "reason": reason})
        return rows

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The READY version that serves a request (the highest one when no version is given).

        An ensemble's or OCR model's composing models are not looked up here: its scheduler
        resolves them once per request (``is_ready`` and the index check them too)."""
        record = self._records.get(name)
        if record is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            try:
                number = int(version)
            except ValueError:
                raise InvalidArgument(f"model version must be an integer, got '{version}'") from None
            status = record.versions.get(number)
            if status is None:
                raise NotFound(f"Request for unknown model: '{name}' version {number} is not found")
            if status.state != ModelState.READY or status.model is None:
                raise Unavailable(
                    f"Request for unknown model: '{name}' version {number} is not at ready state "
                    f"({status.state.value}" + (f": {status.reason})" if status.reason else ")")
                )
            return status.model
        served: ModelVersion | None = None
        highest = -1
        for number, status in record.versions.items():  # a loop, not a dict per request
            if number > highest and status.state == ModelState.READY and status.model is not None:
                served, highest = status.model, number
        if served is None:
            raise Unavailable(
                f"Request for unknown model: '{name}' has no available versions ({self._why_not_ready(record)})"
            )
        return served

    @staticmethod
    def _why_not_ready(record: ModelRecord) -> str:
        if record.error:
            return record.error
        reasons = [
            f"version {v} {s.state.value}" + (f" ({s.reason})" if s.reason else "")
            for v, s in sorted(record.versions.items())
        ]
        return "; ".join(reasons) or "no version is loaded"

    def is_ready(self, name: str, version: str = "") -> bool:
        """READY and able to serve now (an ensemble needs its composing models READY)."""
        try:
            return not self.get(name, version).unready_reason()
        except FerryError:
            return False

    def unready_named_models(self) -> list[str]:
        """The models the server is meant to serve that are not READY now (strict readiness).

        Meant to serve: the repository's models, or in explicit mode those --load-model names and
        the repository API has loaded since (an unloaded one no longer counts)."""
        names = sorted(self._named) if self._named is not None else self.scan()
        return [name for name in names if not self.is_ready(name)]

    def ready_models(self) -> list[ModelVersion]:
        return [
            s.model
            for r in self._records.values()
            for s in r.versions.values()
            if s.state == ModelState.READY and s.model is not None
        ]

    # --- the repository API -------------------------------------------------------------------

    def _require_explicit(self, action: str) -> None:
        if self.control_mode != ControlMode.EXPLICIT:
            raise Unavailable(
                f"explicit model {action} is not allowed in model control mode '{self.control_mode.value}'; "
                "start the server with --model-control-mode=explicit"
            )

    async def load(self, name: str, config_json: str | None = None) -> None:
        """Load (or reload) a model through the repository API; raises with the reason on failure."""
        self._require_explicit("load")
        if not model_directory(self.repository, name).is_dir():
            raise NotFound(f"failed to load '{name}': no model directory '{name}' in the model repository")
        if self._named is not None:
            self._named.add(name)
        await self._load(name, config_json)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model; with ``unload_dependents`` also the ensembles that use it (as Triton)."""
        self._require_explicit("unload")
        check_model_name(name)
        self._forget(name)
        record = self._records.get(name)
        if record is None or not record.versions:
            if not (self.repository / name).is_dir():
                raise NotFound(f"Request for unknown model: '{name}' is not found")
            return
        if unload_dependents:
            for dependent in self._dependents(name):
                self._forget(dependent)
                await self._unload(self._records[dependent], f"unloaded with '{name}' (unload_dependents)")
        await self._unload(record, "unloaded")

    def _forget(self, name: str) -> None:
        """An unloaded model no longer holds strict readiness back."""
        if self._named is not None:
            self._named.discard(name)

    def _dependents(self, name: str) -> list[str]:
        """Loaded ensembles that run ``name``, directly or through another ensemble (outermost first)."""
        found: list[str] = []
        frontier = [name]
        while frontier:
            current = frontier.pop()
            for record in self._records.values():
                users = any(
                    s.model is not None and current in s.model.composing_models for s in record.versions.values()
                )
                if users and record.name not in found and record.name != name:
                    found.append(record.name)
                    frontier.append(record.name)
        return found[::-1]

    async def ensure_loaded(self, name: str, chain: tuple[str, ...] = ()) -> None:
        """Load a model an ensemble needs, unless it is READY (a load in progress finishes first);
        ``chain``: the loads that led to this one (the ensemble's own, outermost first)."""
        if name in chain:
            raise ModelLoadError(f"circular dependency: {' -> '.join((*chain, name))}")
        check_model_name(name)
        waiter = chain[-1] if chain else ""
        self._refuse_waiting_cycle(waiter, name)
        if waiter:
            self._waits_for[waiter] = name
        try:
            record = self._records.get(name)
            if record is not None:
                async with record.lock:
                    pass
                if self.is_ready(name):
                    return
            if not model_directory(self.repository, name).is_dir():
                raise NotFound(f"model '{name}' is not in the repository")
            await self._load(name, None, chain)
        finally:
            if waiter:
                self._waits_for.pop(waiter, None)

    def _refuse_waiting_cycle(self, waiter: str, name: str) -> None:
        """Refuse to wait for a load that (through other loads) waits for ``waiter``: a cycle of
        ensembles loaded concurrently (at start-up) would otherwise never finish."""
        path = [waiter, name]
        current = name
        while current in self._waits_for and current != waiter:
            current = self._waits_for[current]
            path.append(current)
            if len(path) > len(self._waits_for) + 2:
                return  # a cycle among others, not through this load; theirs to report
        if waiter and current == waiter:
            raise ModelLoadError(f"circular dependency: {' -> '.join(path)}")

    # --- loading and unloading ----------------------------------------------------------------

    async def _load_logged(self, name: str) -> None:
        """Load at start-up or on a poll: a failure is in the log (``_failed``) and the index, not raised."""
        try:
            await self._load(name, None)
        except ModelLoadError:
            pass  # logged once where it was raised
        except FerryError as exc:
            log.error("%s", exc.message)

    @staticmethod
    def _failed(name: str, reason: str) -> ModelLoadError:
        """The one log line of a failed load (whoever asked for it), and the error to raise."""
        error = ModelLoadError(f"failed to load '{name}': {reason}")
        log.error("%s", error.message)
        return error

    async def _load(self, name: str, config_json: str | None, chain: tuple[str, ...] = ()) -> None:
        record = self._records.setdefault(name, ModelRecord(name))
        async with record.lock:
            model_dir = self.repository / name
            source = f"{name}/{CONFIG_FILENAME}"  # repository-relative: messages never show server paths
            fingerprint = _fingerprint(model_dir)
            try:
                model_directory(self.repository, name)  # a symlink must not lead out of the repository
                config = await asyncio.to_thread(self._read_config, model_dir, config_json, source)
                validate_model_config(config, name)
                wanted = select_versions(config.version_policy, versions_on_disk(model_dir))
                if not wanted:
                    raise ModelLoadError(f"model '{name}' has no version directory that its version policy serves")
            except (FerryError, OSError) as exc:  # OSError: an unreadable directory or file
                reason = exc.message if isinstance(exc, FerryError) else f"cannot read {model_dir}: {exc.strerror}"
                record.error = self._without_paths(reason)
                record.fingerprint = fingerprint
                raise self._failed(name, record.error) from None
            record.error = ""
            record.fingerprint = fingerprint
            failures = await asyncio.gather(
                *(self._load_version(record, model_dir, v, config, source, chain) for v in wanted)
            )
            stale = [v for v in record.versions if v not in wanted and record.versions[v].model is not None]
            await asyncio.gather(
                *(self._unload_version(record, v, "no longer served by the version policy") for v in stale)
            )
            errors = [f for f in failures if f]
            if errors:
                raise self._failed(name, "; ".join(errors))

    def _without_paths(self, message: str) -> str:
        """A load error as callers see it: repository paths become repository-relative, so no
        message reveals where the server keeps its files."""
        for root in {str(self.repository.resolve()), str(self.repository.absolute())}:
            message = message.replace(root + "/", "").replace(root, "<repository>")
        return message

    @staticmethod
    def _read_config(model_dir: Path, config_json: str | None, source: str) -> mc.ModelConfig:
        if config_json:
            return parse_config_json(config_json, f"config parameter for '{model_dir.name}'")
        return read_config_file(model_dir) or mc.ModelConfig()

    async def _load_version(
        self,
        record: ModelRecord,
        model_dir: Path,
        version: int,
        config: mc.ModelConfig,
        source: str,
        chain: tuple[str, ...] = (),
    ) -> str:
        """Load one version; the old copy keeps serving until the new one is READY. Returns an error."""
        old = record.versions.get(version)
        if old is None or old.model is None:
            record.versions[version] = VersionStatus(ModelState.LOADING)
        try:
            if is_ensemble(config) or is_ocr(config):
                load = load_ocr if is_ocr(config) else load_ensemble
                model = await load(model_dir, version, config, source, LoadChain(self, (*chain, record.name)))
            else:
                model = await asyncio.to_thread(load_version, model_dir, version, config, source)
        except FerryError as exc:
            reason = self._without_paths(exc.message)
        except Exception as exc:  # an engine's unexpected failure must not take the server down
            log.exception("model '%s' version %d: unexpected load failure", record.name, version)
            reason = self._without_paths(f"unexpected error: {exc}")
        else:
            model.scheduler.start()
            if self.on_loaded:
                self.on_loaded(model)
            record.versions[version] = VersionStatus(ModelState.READY, model=model)
            log.info(
                "model '%s' version %d READY in %.2fs (%s)",
                record.name,
                version,
                model.load_seconds,
                ", ".join(i.device for i in model.instances),
            )
            if old is not None and old.model is not None:
                await self._retire(old)
            return ""
        if old is None or old.model is None:
            record.versions[version] = VersionStatus(ModelState.UNAVAILABLE, reason)
        return f"version {version}: {reason}"

    async def _unload(self, record: ModelRecord, reason: str) -> None:
        async with record.lock:
            await asyncio.gather(*(self._unload_version(record, v, reason) for v in list(record.versions)))

    async def _unload_version(self, record: ModelRecord, version: int, reason: str) -> None:
        status = record.versions.get(version)
        if status is None:
            return
        if status.model is None:
            record.versions[version] = VersionStatus(ModelState.UNAVAILABLE, reason)
            return
        record.versions[version] = VersionStatus(ModelState.UNLOADING, reason)
        await self._retire(status)
        record.versions[version] = VersionStatus(ModelState.UNAVAILABLE, reason)

    @staticmethod
    async def _retire(status: VersionStatus, timeout: float | None = None) -> None:
        """Let a replaced or unloaded version finish what it accepted, then free its instances."""
        model = status.model
        if model is None:
            return
        await model.scheduler.stop(timeout)
        await asyncio.to_thread(model.close)
        status.model = None  # nothing keeps the closed version's buffers alive
        await asyncio.to_thread(release_free_memory)

    # --- poll mode ------------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.poll_once()
            except Exception:  # polling must survive anything a user does to the directory
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Load new models, reload changed ones and unload removed ones."""
        present = set(self.scan())
        for name in sorted(present):
            record = self._records.get(name)
            if record is None or record.fingerprint != _fingerprint(self.repository / name):
                await self._load_logged(name)
        for name in sorted(set(self._records) - present):
            await self._unload(self._records[name], "removed from the repository")
            del self._records[name]


async def _no_request_path(step: StepRequest) -> Outputs:
    """The step path of a manager no request path serves (nothing serves composite requests then)."""
    raise Unavailable(f"model '{step.model.name}': no request path serves this model manager")
