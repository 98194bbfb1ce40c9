"""Who the client is behind a reverse proxy: X-Forwarded-For / RFC 7239 Forwarded, read only from trusted proxies.

A proxy appends the address it received the request from to the header, so the header's right-hand end is written by
proxies we trust and its left-hand end by whoever sent the request (anyone can forge it). The client is therefore the
right-most entry that is not itself a trusted proxy, and only when the peer (the TCP connection's other end) is one:
from any other peer the header is ignored. `access.trusted_proxies` lists the proxies' networks (CIDRs; empty, the
default: trust nobody, the peer is the client); `access.forwarded_header` names the one header they write (reading a
second one would let a client forge it, since the proxy passes it through untouched).

An entry that is not an address (`unknown`, an obfuscated `_hidden` identifier, garbage) ends the walk: the client is
then the nearest trusted hop, marked not forwarded (it names no client of its own). Ports are dropped, IPv6 brackets
removed, IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) read as IPv4.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ClientAddress:
    host: str  # the client's address ("unknown" when there is none)
    forwarded: bool  # read from a trusted proxy's header (False: the peer itself)


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """'10.0.0.0/8', '127.0.0.1' (one host), '::1', 'fd00::/8' -> networks; raises ValueError on anything else."""
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs)


def parse_address(value: str) -> IPAddress | None:
    """One node of a forwarded header: '192.0.2.43', '192.0.2.43:47011', '[2001:db8::1]:4711', '2001:db8::1',
    '"[::1]"'. None when it is not an address (unknown, _obfuscated, garbage)."""
    v = value.strip().strip('"').strip()
    if v.startswith("["):
        v = v[1:].split("]", 1)[0]
    elif v.count(":") == 1:  # IPv4 with a port (a bare IPv6 address has at least two colons)
        v = v.split(":", 1)[0]
    try:
        addr = ipaddress.ip_address(v.split("%", 1)[0])  # no zone ids
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    """Split on `sep` except inside quoted strings (RFC 7230 quoted-string, backslash escapes)."""
    parts, current, quoted, escaped = [], [], False, False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif quoted and ch == "\\":
            current.append(ch)
            escaped = True
        elif ch == '"':
            current.append(ch)
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] == '"':
        out, escaped = [], False
        for ch in v[1:-1]:
            if escaped or ch != "\\":
                out.append(ch)
                escaped = False
            else:
                escaped = True
        return "".join(out)
    return v


def forwarded_for(values: Sequence[str]) -> list[str]:
    """The `for=` node of every element of RFC 7239 Forwarded header values, in order (an element without one
    gives '' so that it still counts as a hop): 'for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8::1]:80"'
    -> ['192.0.2.60', '[2001:db8::1]:80']."""
    nodes: list[str] = []
    for value in values:
        for element in _split_outside_quotes(value, ","):
            if not element.strip():
                continue
            node = ""
            for pair in _split_outside_quotes(element, ";"):
                name, sep, raw = pair.partition("=")
                if sep and name.strip().lower() == "for":
                    node = _unquote(raw)
            nodes.append(node)
    return nodes


def x_forwarded_for(values: Sequence[str]) -> list[str]:
    """The nodes of X-Forwarded-For header values, in order (several header lines are one list, RFC 7230 3.2.2)."""
    return [n.strip() for value in values for n in value.split(",") if n.strip()]


def _trusted(addr: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(addr.version == n.version and addr in n for n in networks)


def client_address(peer: str | None, header_values: Sequence[str], networks: Sequence[IPNetwork],
                   header: str = "x-forwarded-for") -> ClientAddress:
    """The client's address: the peer, unless the peer is a trusted proxy and its header names someone (see the
    module's docstring). `header_values`: every value of `header` ('x-forwarded-for' or 'forwarded')."""
    peer_addr = parse_address(peer) if peer else None
    if peer_addr is None:
        return ClientAddress(peer or "unknown", False)
    if not networks or not header_values or not _trusted(peer_addr, networks):
        return ClientAddress(str(peer_addr), False)
    nodes = forwarded_for(header_values) if header == "forwarded" else x_forwarded_for(header_values)
    nearest = peer_addr  # the hop the request came from
    for node in reversed(nodes):
        addr = parse_address(node)
        if addr is None:  # unknown / obfuscated / garbage: names no client; the nearest hop is all we know
            return ClientAddress(str(nearest), False)
        if not _trusted(addr, networks):
            return ClientAddress(str(addr), True)
        nearest = addr
    if nodes:  # every hop is a trusted network (an internal client): the left-most one started the request
        return ClientAddress(str(nearest), True)
    return ClientAddress(str(peer_addr), False)
