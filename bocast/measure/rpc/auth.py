"""Who may use the RPC fleet: loopback only by default, a shared token for anything else.

A GPU server runs what its clients upload (a session can call any TVM global function of the
server process: load a module, write a file), as TVM's own server does, and whatever it answers
becomes a record. So every peer proves that it holds the fleet's shared token before the other
side acts on anything it sends:

- tracker connections (servers registering, runners requesting, ``summary``): after TVM's magic
  the tracker answers :data:`AUTH_MAGIC` and a nonce; the peer answers its own nonce and
  ``HMAC(token, "client", tracker nonce, peer nonce)``; the tracker answers
  ``HMAC(token, "tracker", ...)``. Either side closes on a wrong MAC;
- server sessions (TVM's C++ client speaks first and once, so no round trip fits before the
  session starts): the server's nonce is the matchkey it registered with the tracker (fresh
  after every session, handed only to the requester the tracker chose); the client appends
  ``-bocast-auth=NONCE.HMAC(token, "session", matchkey, NONCE)`` to TVM's key, and the server
  proves itself in ``bocast.rpc.info`` with ``HMAC(token, "server", matchkey, NONCE)``: the
  runner takes results only from a session whose server proved it was the one granted.

Without a token the protocol is TVM's, unchanged, and allowed only where every address is
loopback (every local user is then trusted). The token is read from a file or the environment,
never from the command line (which every user of the host can read in ``ps``). Neither
confidentiality nor integrity against someone on the network path is provided (no TLS): across
untrusted networks, run the fleet over a VPN or SSH tunnel.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat

TOKEN_ENV = "BOCAST_RPC_TOKEN"
MIN_TOKEN_CHARS = 16
AUTH_WORD = "-bocast-auth="  # the word of TVM's session key that carries the client's proof


class AuthError(ValueError):
    """A missing, unreadable or weak token, or a peer that did not prove the token."""


def load_token(path: str | None = None) -> str | None:
    """The shared token: the file ``path`` if given, else ``$BOCAST_RPC_TOKEN``, else None."""
    if path:
        try:
            st = os.stat(path)
            if st.st_mode & 0o077:
                raise AuthError(f"token file {path} is open to other users (mode "
                                f"{stat.filemode(st.st_mode)}): chmod 600 {path}")
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise AuthError(f"token file {path}: {e.strerror or e}") from None
        source = f"token file {path}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
        source = f"${TOKEN_ENV}"
    if len(token) < MIN_TOKEN_CHARS:
        raise AuthError(f"{source}: the token has {len(token)} characters, at least "
                        f"{MIN_TOKEN_CHARS} needed (python -c 'import secrets; "
                        "print(secrets.token_hex(32))')")
    return token


def resolve(host: str) -> list[str]:
    """The addresses ``host`` names (OSError if none)."""
    return sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback one (False if it names none)."""
    try:
        addrs = resolve(host)
    except (OSError, UnicodeError):
        return False
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def require(token: str | None, hosts: dict[str, str]) -> None:
    """AuthError unless there is a token or every one of ``hosts`` (what: host) is loopback."""
    if token is not None:
        return
    for what, host in hosts.items():
        if not is_loopback(host):
            why = "is not loopback" if _resolves(host) else "does not resolve here"
            raise AuthError(f"{what} {host} {why}: the fleet needs a shared token "
                            f"(${TOKEN_ENV} or a token file; see docs/rpc.md, 'RPC security')")


def _resolves(host: str) -> bool:
    try:
        return bool(resolve(host))
    except (OSError, UnicodeError):
        return False


def nonce() -> str:
    return secrets.token_hex(16)


def mac(token: str, *parts: str) -> str:
    """HMAC-SHA256 of ``parts``; the first part names the role, so that no proof made for one
    step is accepted in another (a tracker's answer is never a valid client proof)."""
    msg = "\0".join(parts).encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def check(token: str, proof: object, *parts: str) -> bool:
    return isinstance(proof, str) and hmac.compare_digest(proof, mac(token, *parts))


def session_word(token: str, matchkey: str) -> tuple[str, str]:
    """(the word a client appends to TVM's session key, its nonce)."""
    n = nonce()
    return f"{AUTH_WORD}{n}.{mac(token, 'session', matchkey, n)}", n


def check_session_word(token: str, matchkey: str, words: list[str]) -> str | None:
    """The client's nonce if one of ``words`` proves the token for ``matchkey``, else None."""
    for w in words:
        if w.startswith(AUTH_WORD):
            n, _, proof = w[len(AUTH_WORD):].partition(".")
            if check(token, proof, "session", matchkey, n):
                return n
    return None


def server_proof(token: str, matchkey: str, client_nonce: str) -> str:
    return mac(token, "server", matchkey, client_nonce)


def server_proved(token: str, proof: object, matchkey: str, client_nonce: str) -> bool:
    return isinstance(proof, str) and \
        hmac.compare_digest(proof, server_proof(token, matchkey, client_nonce))
