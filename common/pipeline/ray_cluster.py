"""Joining a Ray cluster (or starting one for the run), with Ray's token authentication.

Ray 2.60 authenticates with a token: a head started where a token exists (``~/.ray/auth_token``,
which ``ray get-auth-token --generate`` writes and every ``ray.init()`` that starts a local
cluster creates) only admits nodes and drivers that present it, and a driver given an address
never turns token mode on by itself: it retries for about 20 seconds, printing a warning per
try, and ends in a traceback. So before ``ray.init`` the driver asks the head for its cluster id
(one gRPC call): a head that wants a token gets this machine's token when there is one (the
driver on the head node has it), and a driver that cannot join stops in one line naming the fix.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional

from common.core.config import Config

_ROOT = Path(__file__).resolve().parents[2]
FORWARDED_ENV = ("OPENAI_", "HARNESS_", "HF_", "TRANSFORMERS_")
AUTH_MODE = "RAY_AUTH_MODE"
FIX = ("set RAY_AUTH_MODE=token with the cluster's token (the head's ~/.ray/auth_token copied to this machine, "
       "or RAY_AUTH_TOKEN) on every node and the driver, as docs/scale.md 'Starting a cluster' does")


class ClusterError(RuntimeError):
    """The driver cannot join the cluster: one line saying why and what to do."""


def local_token() -> Optional[str]:
    """This machine's Ray token, where Ray itself looks: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH's file,
    ``~/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


def _probe(address: str, token: Optional[str], timeout: float = 10.0) -> str:
    """"ok", "unauthenticated" or "unreachable: <why>" for the head's GCS at ``address``."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout,  # type: ignore[attr-defined]
                              metadata=[("authorization", f"Bearer {token}")] if token else None)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return "unauthenticated"
            return f"unreachable: {exc.code().name.lower()}"
    return "ok"


def check_join(address: str) -> None:
    """Make sure ``ray.init(address)`` can join, turning token mode on when the head wants it and
    this machine has a token; else ``ClusterError`` in one line."""
    mode = os.environ.get(AUTH_MODE, "").strip().lower()
    token = local_token()
    first = _probe(address, token if mode == "token" else None)
    if first.startswith("unreachable"):
        raise ClusterError(f"cannot join the Ray cluster at {address}: nothing answers there ({first[13:]}); "
                           f"start its head with `make ray-head` (docs/scale.md 'Starting a cluster') or fix "
                           f"RAY_ADDRESS / run.ray_address")
    if first == "ok":
        return
    if mode == "token":
        which = "none found" if token is None else "not the head's"
        raise ClusterError(f"cannot join the Ray cluster at {address}: it refuses this machine's token ({which}); "
                           f"{FIX}")
    if mode == "disabled" or token is None or _probe(address, token) != "ok":
        raise ClusterError(f"cannot join the Ray cluster at {address}: it requires token authentication; {FIX}")
    # The head wants the token this machine holds: token mode for this driver (as Ray does itself
    # for a cluster it finds on this machine); Ray read its config when imported, so it reloads it.
    os.environ[AUTH_MODE] = "token"
    from ray._raylet import Config  # type: ignore[attr-defined]

    Config.initialize("")


def connect(cfg: Config) -> Any:
    """Join the cluster named by RAY_ADDRESS or ``run.ray_address``, or start a local one."""
    address = os.environ.get("RAY_ADDRESS") or cfg.run.ray_address
    if not address or address.split(":")[0] in ("127.0.0.1", "localhost"):
        # A cluster for this run only, or a head on this machine's loopback interface: Ray reads
        # this when imported and would otherwise name (and, for a new cluster, listen on) the
        # machine's network address, where a loopback head does not answer.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return ray
    # The workers import this checkout (on other nodes: the same path; docs/scale.md) and reach the
    # endpoints as the driver does: its endpoint and key variables travel with the job (never a file).
    forwarded = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV) or k == "OMP_NUM_THREADS"}
    env = {"env_vars": {**forwarded, "PYTHONPATH": str(_ROOT)}}
    if address:
        if address != "auto" and ":" in address and not address.startswith(("ray://", "http")):
            check_join(address)
        ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
    else:
        # address="local": a new cluster, never one a `ray start` on this machine left running.
        ray.init(address="local", num_cpus=cfg.run.ray_cpus or os.cpu_count(), include_dashboard=False,
                 _node_ip_address="127.0.0.1", runtime_env=env, logging_level=logging.WARNING)
    return ray
