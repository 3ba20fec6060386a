/* scope.h: where an address leads, judged from its text alone (no lookup,
 * no I/O), for the addresses a relay hands a node to dial in a hole punch
 * (punch.c; docs/security.md "Hole punching"). A relay can name any
 * address; these rules keep a hostile one from aiming a node behind a NAT
 * at its own host or its LAN.
 *
 * The scopes, of "a.b.c.d:port" or "[v6]:port":
 *  - SCOPE_LOCAL: never reachable across a network, or never one host:
 *    loopback (127/8, ::1), unspecified (0/8, ::), link-local
 *    (169.254/16, fe80::/10, or any zoned v6 "...%if"), multicast
 *    (224/4, ff00::/8), 240/4 with the broadcast 255.255.255.255, the
 *    v4-compatible ::/96, the names "localhost" and "*.localhost"
 *    (RFC 6761), and text that is neither a literal nor a name (a bare
 *    v6, an empty host);
 *  - SCOPE_PRIVATE: RFC 1918 (10/8, 172.16/12, 192.168/16), shared
 *    address space (100.64/10, carrier-grade NAT), unique local
 *    (fc00::/7) and the old site-local (fec0::/10);
 *  - SCOPE_PUBLIC: every other literal (v4-mapped v6 is judged as its v4);
 *  - SCOPE_NAME: any other name: its scope is its resolver's, which the
 *    core cannot ask. Hosts that name their nodes (the in-memory tests,
 *    stitch-sim) use names; a real driver's transport addresses are
 *    literals. */
#ifndef STITCH_SWARM_SCOPE_H
#define STITCH_SWARM_SCOPE_H

typedef enum addr_scope {
  SCOPE_LOCAL,
  SCOPE_PRIVATE,
  SCOPE_PUBLIC,
  SCOPE_NAME
} addr_scope;

/* The scope of ADDR ("host:port", "[v6]:port"; the port is not judged). */
addr_scope scope_of(const char *addr);

/* Whether a node may dial TARGET for a punch that the relay at RELAY
 * (the address the node's own link to the relay runs to, never one a peer
 * claims) passed on:
 *  - a local target, never;
 *  - a public one, always;
 *  - a private one only through a relay at a private address: then the
 *    node reached its relay across a private network, and a member seen
 *    from there at a private address may well be on it too (netlab's
 *    namespaces, a cluster's 10/8); a relay reached across the internet
 *    has no business naming an address on the node's own LAN;
 *  - a name only through a relay that is itself a name (a host that names
 *    its nodes); a relay at a literal saw the other end at a literal. */
int scope_punch_ok(const char *target, const char *relay);

/* Its name, for logs: "local", "private", "public", "name". */
const char *scope_name(addr_scope sc);

#endif
