"""Client addresses behind proxies: X-Forwarded-For and RFC 7239 Forwarded, read only from trusted peers."""
from __future__ import annotations

import pytest

from triserve.kernel.protection.forwarded import (
    ClientAddress,
    client_address,
    forwarded_for,
    parse_address,
    parse_networks,
    x_forwarded_for,
)

PROXIES = parse_networks(["10.0.0.0/8", "127.0.0.1", "fd00::/8"])


@pytest.mark.parametrize("node, expected", [
    ("192.0.2.43", "192.0.2.43"),
    (" 192.0.2.43:47011 ", "192.0.2.43"),
    ("[2001:db8:cafe::17]:4711", "2001:db8:cafe::17"),
    ('"[2001:db8:cafe::17]"', "2001:db8:cafe::17"),
    ("2001:db8::1", "2001:db8::1"),
    ("::ffff:198.51.100.3", "198.51.100.3"),  # IPv4-mapped: one client, one key
    ("fe80::1%eth0", "fe80::1"),
    ("unknown", None),
    ("_hidden", None),
    ("", None),
    ("999.1.1.1", None),
])
def test_parse_address(node, expected):
    addr = parse_address(node)
    assert (str(addr) if addr else None) == expected


def test_forwarded_header_elements_pairs_quotes_and_case():
    values = ['for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711"',
              'proto=https;for="198.51.100.9,x";host="a;b"', "by=10.0.0.1", 'for="\\"quoted\\""']
    assert forwarded_for(values) == ["192.0.2.60", "[2001:db8:cafe::17]:4711", "198.51.100.9,x", "", '"quoted"']


def test_x_forwarded_for_lines_are_one_list():
    assert x_forwarded_for(["203.0.113.1, 10.0.0.5", " 10.0.0.6 ,"]) == ["203.0.113.1", "10.0.0.5", "10.0.0.6"]


def xff(peer: str, *values: str) -> ClientAddress:
    return client_address(peer, list(values), PROXIES)


def test_the_right_most_untrusted_entry_is_the_client():
    # the client forged a left-most entry; the proxies appended the real one and their own
    assert xff("10.0.0.2", "6.6.6.6, 198.51.100.7, 10.0.0.9") == ClientAddress("198.51.100.7", True)
    assert xff("127.0.0.1", "198.51.100.7") == ClientAddress("198.51.100.7", True)
    assert xff("127.0.0.1", "198.51.100.7:5000") == ClientAddress("198.51.100.7", True)


def test_an_untrusted_peer_is_the_client_whatever_it_says():
    assert xff("203.0.113.5", "198.51.100.7") == ClientAddress("203.0.113.5", False)
    assert client_address("10.0.0.2", ["198.51.100.7"], ()) == ClientAddress("10.0.0.2", False)  # trust nobody


def test_a_trusted_peer_without_a_header_is_itself():
    assert xff("10.0.0.2") == ClientAddress("10.0.0.2", False)
    assert xff("10.0.0.2", "") == ClientAddress("10.0.0.2", False)


def test_an_unreadable_entry_stops_at_the_nearest_trusted_hop():
    assert xff("10.0.0.2", "198.51.100.7, unknown, 10.0.0.9") == ClientAddress("10.0.0.9", False)
    assert xff("10.0.0.2", "garbage") == ClientAddress("10.0.0.2", False)


def test_every_hop_trusted_means_the_left_most_started_it():
    assert xff("10.0.0.2", "10.1.2.3, 10.0.0.9") == ClientAddress("10.1.2.3", True)


def test_ipv6_peers_and_mapped_addresses():
    assert xff("::ffff:127.0.0.1", "198.51.100.7") == ClientAddress("198.51.100.7", True)
    assert xff("fd00::1", "2001:db8::5") == ClientAddress("2001:db8::5", True)
    assert xff("2001:db8::9", "198.51.100.7") == ClientAddress("2001:db8::9", False)


def test_rfc7239_forwarded():
    got = client_address("10.0.0.2", ['for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https', "for=10.0.0.9"],
                         PROXIES, header="forwarded")
    assert got == ClientAddress("2001:db8:cafe::17", True)
    assert client_address("10.0.0.2", ["for=_gazonk"], PROXIES, header="forwarded") == ClientAddress("10.0.0.2", False)
    assert client_address("10.0.0.2", ["by=10.0.0.1"], PROXIES, header="forwarded") == ClientAddress("10.0.0.2", False)


def test_no_peer_at_all():
    assert client_address(None, ["198.51.100.7"], PROXIES) == ClientAddress("unknown", False)


def test_bad_networks_are_refused():
    with pytest.raises(ValueError):
        parse_networks(["10.0.0.0/33"])
