"""Credentials for an OCI registry host (the oci:// store, oci.py), and keeping them out of every message.

Credentials for a registry host, the first source that has them:
  1. TRISERVE_REGISTRY_USERNAME + TRISERVE_REGISTRY_PASSWORD (the TRISERVE_REGISTRY_* family of configs/settings.py:
     TRISERVE_REGISTRY_URI names the store); they apply to every oci:// store the process opens, so copying between
     two registries with different accounts takes the docker config file;
  2. the docker config file, $DOCKER_CONFIG/config.json if DOCKER_CONFIG is set, else ~/.docker/config.json: the
     `auths` entry of the host (keyed `host[:port]` with or without http(s)://, localhost and 127.0.0.1 alike, Docker
     Hub's `https://index.docker.io/v1/`) with base64 `auth` ("user:password") or `username` + `password`, as
     `docker login`, `podman login --authfile`, `oras login` and `skopeo login` write it. Credential helpers
     (credsStore, credHelpers) are not run: put the entry inline or use the environment variables;
  3. none: anonymous (public pulls). A registry that wants credentials then raises RegistryAuthError saying where
     they are looked for.
The password is never logged, never part of an exception message or the store's URI, never written into the
registry (manifests, alias documents) or into pulled files; credentials inside the URI (oci://user:pw@host) are
refused. A refused login (Basic credentials rejected, or the token service answering 401/403) raises
RegistryAuthError (triserve.models.stores.base, a RegistryError: the CLI prints "error: ... authentication failed ..."
naming
the registry, the user and the credential source, and exits 1 without a traceback); it is never retried (only
RegistryUnavailable is, by triserve.models.cache).

"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import oras.auth.utils
import oras.utils

from .base import RegistryAuthError, RegistryError

ENV_USERNAME = "TRISERVE_REGISTRY_USERNAME"
ENV_PASSWORD = "TRISERVE_REGISTRY_PASSWORD"
DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # where they came from, for messages: "$TRISERVE_REGISTRY_USERNAME" or "docker config <path>"

    def basic(self) -> str:
        return oras.auth.utils.get_basic_auth(self.username, self.password)

    def describe(self) -> str:
        return f"user {self.username!r} from {self.source}"


def docker_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """$DOCKER_CONFIG/config.json when DOCKER_CONFIG is set, else ~/.docker/config.json (docker's own rule)."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"]).expanduser() / "config.json"
    return Path(os.path.expanduser("~")) / ".docker" / "config.json"


def _config_host(key: str) -> str:
    """An `auths` key (host, host:port, https://host/v1/) -> host[:port], lower case."""
    return re.sub(r"^[a-z][a-z0-9+.-]*://", "", key.strip().lower()).split("/", 1)[0]


def _same_host(key_host: str, host: str) -> bool:
    if key_host in DOCKER_HUB_HOSTS and host in DOCKER_HUB_HOSTS:
        return True
    return key_host in set(oras.utils.iter_localhosts(host))


def find_credentials(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials for a registry host: the environment variables, else the docker config file, else None."""
    env = os.environ if environ is None else environ
    username, password = env.get(ENV_USERNAME), env.get(ENV_PASSWORD)
    if username or password:
        if not (username and password):
            missing = ENV_PASSWORD if username else ENV_USERNAME
            raise RegistryAuthError(f"registry {host}: {missing} is not set ({ENV_USERNAME} and {ENV_PASSWORD} go "
                                    "together)")
        return Credentials(username, password, f"${ENV_USERNAME}/${ENV_PASSWORD}")
    path = docker_config_path(env)
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # the message of a JSON error may quote the file: type only
        raise RegistryError(f"docker config {path} is unreadable ({type(exc).__name__})") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    host = host.lower()
    for key, entry in (auths or {}).items():
        if not isinstance(entry, dict) or not _same_host(_config_host(key), host):
            continue
        source = f"docker config {path} (auths[{key!r}])"
        if entry.get("auth"):
            try:
                user, sep, secret = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (binascii.Error, ValueError):
                raise RegistryError(f"{source}: `auth` is not base64 of 'user:password'") from None
            if not sep:
                raise RegistryError(f"{source}: `auth` is not base64 of 'user:password'")
            return Credentials(user, secret, source)
        if entry.get("username") and entry.get("password"):
            return Credentials(entry["username"], entry["password"], source)
    return None


def where_credentials_go(host: str) -> str:
    """What a refusal tells the user to do."""
    return (f"set {ENV_USERNAME} and {ENV_PASSWORD}, or add an `auths` entry for {host} to {docker_config_path()} "
            f"(`docker login {host}` writes one; DOCKER_CONFIG names another directory)")


def redact(text: str, credentials: Credentials | None) -> str:
    """Whatever a registry or a library put in a message, the password and Basic blob never leave."""
    if credentials is not None:
        for secret in (credentials.basic(), credentials.password):
            if secret:
                text = text.replace(secret, "***")
    return re.sub(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 ***", text)
