"""Redaction and bounding: what every header and body passes through before an observer sees it.

This room turns secrets (`Authorization`, cookies, API keys, `Mcp-Session-Id`, `requestState`, any
header or query parameter named like a credential, any configured body key) into
`<redacted len=N hmac:xxxxxxxx>` stand-ins: the length plus the first 8 hex digits of an HMAC-SHA-256
of the value under the deployment's key (`redact_key`, random per process when unset), so one secret
is recognisable across messages without being readable, and a weak secret cannot be confirmed offline
by hashing guesses. It bounds bodies to a byte limit with an explicit truncation marker. It works on copies
for observers only: it never touches the traffic itself, never mutates its input, and imports
neither aiohttp, structlog nor textual.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final
from urllib.parse import unquote, unquote_plus

import orjson

from proxy.flows.short_secrets import ShortSecrets
from proxy.flows.text_members import SCHEMA_PROPERTIES, Member, secret_members
from proxy.wire.header_text import readable
from proxy.wire.joined_headers import COOKIE_LINES, SET_COOKIE, joined
from proxy.wire.path_keys import CREDENTIAL_PIECE, mask_target_segments

_USERINFO: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@]*)@")
"""The scheme and userinfo of an absolute URL (`http://user:password@host/...`)."""

DEFAULT_HEADER_NAMES: Final[tuple[str, ...]] = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "mcp-session-id",
    "code",
    "state",
    "sig",
    "code_verifier",
    "assertion",
    "client_assertion",
    "device_code",
)
"""Header, query parameter and form field names masked by default (compared by their words, in any case
or spelling: `code_verifier` masks `codeVerifier` and `Code-Verifier` too): `code`
and `state` are an OAuth redirect's authorization code and its anti-forgery value, `sig` a signed
URL's; `code_verifier`, `assertion`, `client_assertion` and `device_code` are what a token request
proves itself with, and no credential word names them."""

DEFAULT_HEADER_PATTERNS: Final[tuple[str, ...]] = (
    "auth",
    "token",
    "secret",
    "key",
    "credential",
    "session",
    "password",
    "passwd",
    "cookie",
    "pass",
    "pwd",
    "jwt",
    "bearer",
    "dpop",
    "signature",
)
"""Substrings that mark a header or query parameter name as secret by default (any case).

`session` masks `Mcp-Session-Id`: whoever holds a session id can send requests in that session, so it
is a bearer credential; the keyed stand-in still tells one session from another.
"""

MIN_SECRET_TEXT: Final = 4
"""Shorter texts are not masked inside other values: `1` or `on` would blot out half of every header."""

MIN_ECHOED_SECRET: Final = 8
"""Shortest credential a redactor remembers to mask where a server echoes it (a real one is longer)."""

MAX_ECHOED_SECRETS: Final = 32
"""Most credentials a redactor remembers at once (those seen most recently kept): a few clients,
each with one."""

_NOT_ECHOED: Final = ("cookie", "dpop")
"""Secret headers whose values are not remembered for echoes: a cookie changes with every session
and a DPoP proof with every request (remembering them would push out the credentials that last),
and the stand-in of the header itself already tells one from another. Session ids are not either
(`_echoes`)."""

_CREDENTIAL_WORDS: Final = ("token", "key", "secret", "auth", "pass")
"""Words that make a `session` name a credential's (`X-Session-Token`), not a session id's."""

CHALLENGE_HEADERS: Final = frozenset({"www-authenticate", "proxy-authenticate"})
"""Headers named like credentials that carry none: a server's challenge (its scheme, `error`,
`resource_metadata`) is what an OAuth flow is debugged with, so only a name the user lists masks it."""

OAUTH_BODY_KEYS: Final = frozenset(
    {
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "registration_access_token",
        "code_verifier",
        "client_assertion",
        "assertion",
        "subject_token",
        "actor_token",
        "device_code",
        "password",
    }
)
"""Members masked in a JSON body that is not JSON-RPC (by their words, in any case or spelling:
`access_token`, `accessToken`, `Access-Token`): an OAuth token or registration endpoint on the
server's origin answers through the proxy's mirrored paths with the tokens and the client secret
every later request carries. Whole names only: the same endpoints' metadata (`token_endpoint`,
`authorization_servers`) is what an OAuth flow is debugged with."""

_FORM: Final = re.compile(r"[^\s&=]+=[^\s&]*(?:&[^\s&]*)*")
"""A body shaped like `application/x-www-form-urlencoded` (`grant_type=...&code=...`), as an OAuth
token request is: its fields are judged by name like a query's."""

REQUEST_STATE_KEY: Final = "requestState"
"""The MRTR body key whose value is always masked, wherever it appears in a message."""

AUTH_SCHEMES: Final[frozenset[str]] = frozenset(
    {
        "basic",
        "bearer",
        "digest",
        "dpop",
        "gnap",
        "hoba",
        "mutual",
        "negotiate",
        "ntlm",
        "oauth",
        "privatetoken",
        "scram-sha-1",
        "scram-sha-256",
        "vapid",
        "aws4-hmac-sha256",
        "token",
        "apikey",
        "api-key",
    }
)
"""Authorization schemes whose word is kept visible; an unknown first word is masked with the rest."""

_SCHEME_RE: Final = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)([ \t]+)(.+)", re.DOTALL)

_CHALLENGE_TOKEN: Final = re.compile(r"(\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]+)([A-Za-z0-9._~+/-]+=*)\s*")
"""One challenge of a `WWW-Authenticate` list that is a scheme and a bare token (`Negotiate YII...`)."""

_BARE_CREDENTIAL: Final = re.compile(r"[!#$%&'*+./^_`|~0-9A-Za-z-]+=*")
"""A credential after an `Authorization` scheme that is one token68 or token (`SSWS 00Ab...`), not a
list of auth-params: a server may echo it without the scheme, as error messages usually do."""


URL_HEADERS: Final = frozenset({"referer", "location", "content-location"})
"""Headers whose value is a URL: its userinfo and credential-like query values are masked like a path's."""

LINK_HEADER: Final = "link"
_LINK_URI: Final = re.compile(r"<([^>]*)>")
"""A `Link` value's URI-references, each in angle brackets (`<https://...?access_token=...>; rel=next`)."""

REFRESH_HEADER: Final = "refresh"
_REFRESH_URL: Final = re.compile(r"""(\burl\s*=\s*['"]?)([^'"]*)""", re.IGNORECASE)
"""The URL of a `Refresh` value (`0; url=/next?token=...`, optionally quoted)."""

_URL_BEARING: Final = URL_HEADERS | {LINK_HEADER, REFRESH_HEADER}
"""Headers whose values are URLs: their query credentials are learned before any header is scrubbed."""


def keyed_digest(key: bytes, value: str) -> str:
    """HMAC-SHA-256 of a text under `key`, in hex: a fingerprint nobody without the key can check."""
    return hmac.digest(key, value.encode("utf-8", "surrogatepass"), "sha256").hex()


_A_STAND_IN: Final = re.compile(r"<redacted len=\d+ hmac:[0-9a-f]{8}>")
"""What `Redactor.token` makes of a secret."""


def _stand_in(key: bytes, label: str, value: str) -> str:
    return f"<{label} len={len(value)} hmac:{keyed_digest(key, value)[:8]}>"


def _encode_for_mask(value: Any) -> str:
    """Give a non-string secret a stable text form to measure and hash."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: unknown type or nesting beyond orjson's limit
        return repr(value)


class Redactor:
    """Masks secret headers and body values so logs, captures, feeds and exports never hold a secret."""

    def __init__(
        self,
        header_names: Iterable[str] = DEFAULT_HEADER_NAMES,
        header_patterns: Iterable[str] = DEFAULT_HEADER_PATTERNS,
        body_keys: Iterable[str] = (),
        secret_texts: Iterable[str] = (),
        *,
        key: bytes | None = None,
    ) -> None:
        self._key = key or secrets.token_bytes(32)
        """The HMAC key of every stand-in and fingerprint (random per process unless configured)."""
        self._names = frozenset(joined for n in header_names if (joined := joined_words(n)))
        """The names masked, each as its words run together (`Code-Verifier` -> `codeverifier`)."""
        self._given = frozenset(t for t in secret_texts if len(t) >= MIN_SECRET_TEXT)
        """The upstream URL's credentials, which an upstream may echo (say in a redirect's `Location`)."""
        self._echoed: dict[str, None] = {}
        """Credentials seen in secret headers (a client's bearer token), newest last: a server that
        echoes one (a debug header, an error message) must not show it in clear either."""
        self._texts: tuple[str, ...] = ()
        """Secrets masked wherever they appear in any header's value or body string, longest first."""
        self._json_texts: tuple[tuple[bytes, bytes], ...] = ()
        """The longer ones as they appear inside JSON strings, each with its stand-in, for bodies."""
        self._short = ShortSecrets()
        """A URL userinfo's credentials too short to mask wherever they appear (`_userinfo`)."""
        self._patterns = tuple(sorted({p.strip().lower() for p in header_patterns if p.strip()}))
        self._state_keys = frozenset({REQUEST_STATE_KEY.lower()})
        self._body_words = tuple(sorted({"".join(words) for k in body_keys if (words := key_words(k))}))
        """Each configured body key as its words run together (`api_key`, `apiKey` -> `apikey`): a member
        whose name has a run of words that reads the same is masked (`API-Key`, `old_api_key`)."""
        self._key_memo: dict[str, bool] = {}
        self._decisions: dict[str, bool] = {}
        self._tokens: dict[str, str] = {}
        self._header_memo: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._set_texts()
        self._secret_member = _member_pattern(self._state_keys, self._body_words)

    def _set_texts(self) -> None:
        texts = sorted(self._given | self._echoed.keys(), key=len, reverse=True)
        self._texts = tuple(texts)
        self._json_texts = tuple(
            (orjson.dumps(text)[1:-1], orjson.dumps(self.token(text))[1:-1])
            for text in texts
            if len(text) >= MIN_ECHOED_SECRET  # a short query value (`format=json`) is a word in bodies
        )
        self._header_memo.clear()  # a head masked before may hold the new text

    def remember(self, secret: str) -> None:
        """Mask this text wherever it shows up from now on, as a credential seen in a secret header is:
        a secret a person put back into an edited message may come back in the server's answer."""
        self._remember(secret)

    def _remember(self, secret: str) -> None:
        """Mask this credential wherever it shows up from now on (see `_echoed`)."""
        secret = secret.strip()
        if len(secret) < MIN_ECHOED_SECRET or secret in self._given:
            return
        echoed = self._echoed
        if secret in echoed:  # seen again: kept as the most recent, a credential in use is never let go
            del echoed[secret]
            echoed[secret] = None
            return
        echoed[secret] = None
        while len(echoed) > MAX_ECHOED_SECRETS:
            del echoed[next(iter(echoed))]
        self._set_texts()

    # -- headers -----------------------------------------------------------------------------

    def is_secret_header(self, name: str) -> bool:
        """Say whether a header's value must be masked, so callers can decide without masking."""
        key = name.lower()
        decided = self._decisions.get(key)
        if decided is None:
            patterned = key not in CHALLENGE_HEADERS and any(p in key for p in self._patterns)
            decided = patterned or joined_words(key) in self._names
            if len(self._decisions) < 1024:  # bounded memo: header names are few, but never trust peers
                self._decisions[key] = decided
        return decided

    def masking_patterns(self, name: str) -> list[str]:
        """The patterns that mask a header of this name (empty when only its name, or nothing, does)."""
        key = name.lower()
        return [p for p in self._patterns if p in key]

    def headers(self, items: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
        """Return a masked copy of headers (a repeated name's values joined: `joined_headers`) that is
        safe to show or store.

        Each value is given as read (`readable`: a UTF-8 value in its UTF-8 reading), never as the
        latin-1 text the relay keeps.

        Memoized by the exact header list: one client sends the same headers call after call, and the
        capture masks every exchange's request and response heads.
        """
        key = tuple(items.items() if isinstance(items, Mapping) else items)
        memo = self._header_memo
        shown = memo.get(key)
        if shown is None:
            if len(memo) >= _HEADER_MEMO:
                memo.clear()
            shown = memo[key] = self._mask_headers(key)
        return dict(shown)

    def _mask_headers(self, raw: tuple[tuple[str, str], ...]) -> dict[str, str]:
        # Masked as read (a UTF-8 value in its UTF-8 reading): a credential is remembered, and its
        # stand-in made, from the text that bodies and exports show, not from its latin-1 mojibake.
        # A credential that reads otherwise is remembered in its latin-1 reading too, as a string taken
        # from the raw head (a log field) holds it.
        pairs = [(name, readable(value)) for name, value in raw]
        decisions = self._decisions
        masked: list[str | None] = []  # every credential of the head is known before the rest is scrubbed
        for (name, value), (_, wire) in zip(pairs, raw, strict=True):
            key = name.lower()
            secret = decisions.get(key)  # inlined memo lookup: this runs for every header
            if secret is None:
                secret = self.is_secret_header(name)
            if secret:
                if wire != value:
                    self.header_value(name, wire)  # remembers what it holds; its stand-in is not shown
                masked.append(self.header_value(name, value))
                continue
            masked.append(None)
            if key in _URL_BEARING:
                self._url_value(key, value)  # learns its query credentials, echoed in any header
        shown_pairs: list[tuple[str, str]] = []
        for (name, value), shown in zip(pairs, masked, strict=True):
            if shown is None:
                key = name.lower()
                if key in _URL_BEARING:
                    shown = self._url_value(key, value)
                elif key in CHALLENGE_HEADERS:
                    shown = self.challenge(value)
                else:
                    shown = self.scrub(value)
            shown_pairs.append((name, shown))
        return joined(shown_pairs)  # a name repeated in any case under its first spelling

    def _url_value(self, key: str, value: str) -> str:
        """A header value made of URLs (by its lower-case name), each masked like a path."""
        if key == LINK_HEADER:
            return self.link(value)
        if key == REFRESH_HEADER:
            return self.refresh(value)
        return self.path(value)

    def scrub(self, value: str) -> str:
        """`value` with every known secret text in it replaced by its stand-in."""
        for text in self._texts:
            if text in value:
                value = value.replace(text, self.token(text))
        return self._short.scrub(value, self.token) if self._short.any else value

    def header_value(self, name: str, value: str) -> str:
        """Mask one header value if its name is secret, keeping a known Authorization scheme word.

        A field that arrived more than once is recorded joined (`proxy.wire.joined_headers`): each
        cookie of a `Set-Cookie` gets its own stand-in, so the cookies still read one per line; the
        values of any other field are each remembered for echoes, as each alone would have been.
        """
        if not self.is_secret_header(name):
            return value
        key = name.lower()
        if COOKIE_LINES in value and key == SET_COOKIE:
            return COOKIE_LINES.join(self.header_value(name, one) for one in value.split(COOKIE_LINES))
        if _echoes(key):
            self._remember_value(key, value)
            if ", " in value:
                for one in value.split(", "):
                    if _one_credential(key, one):
                        self._remember_value(key, one)
        if key.endswith("authorization"):
            match = _SCHEME_RE.fullmatch(value.strip())
            if match and match.group(1).lower() in AUTH_SCHEMES:
                return f"{match.group(1)} {self.token(match.group(3))}"
        return self.token(value)

    def _remember_value(self, key: str, value: str) -> None:
        """Remember the credential a secret header's value holds, to mask where it is echoed: after a
        known `Authorization` scheme the credential (a Basic one decoded too), else the value (and an
        unknown scheme's bare credential on its own)."""
        if key.endswith("authorization"):
            match = _SCHEME_RE.fullmatch(value.strip())
            if match and match.group(1).lower() in AUTH_SCHEMES:
                self._remember(match.group(3))
                if match.group(1).lower() == "basic":
                    self._remember_basic(match.group(3))
                return
            if match and _BARE_CREDENTIAL.fullmatch(match.group(3)):
                self._remember(match.group(3))  # an unknown scheme's credential, echoed on its own
        self._remember(value)

    def _remember_basic(self, credentials: str) -> None:
        """Remember a Basic credential decoded too, `user:password`, and the password alone unless it
        could be a word: a server echoes it decoded (an error naming who failed to log in, a debug
        tool), as a query's is; a password like `password` would blot out that word (a schema's
        property name) in every body instead."""
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return
        self._remember(decoded)
        _user, colon, password = decoded.partition(":")
        if colon and not password.isalpha():
            self._remember(password)

    def learn(self, target: str, headers: Mapping[str, str]) -> None:
        """Remember the credentials a request head carries (see `_echoed`) without showing it: what is
        shown of its exchange before anything masked the head must mask their echoes too."""
        self.target(target)
        self.headers(headers)

    def link(self, value: str) -> str:
        """A `Link` value with each URI-reference masked like a path, and known secret texts masked."""
        return self.scrub(_LINK_URI.sub(lambda m: f"<{self.path(m.group(1))}>", value))

    def refresh(self, value: str) -> str:
        """A `Refresh` value with its URL masked like a path, and known secret texts masked."""
        return self.scrub(_REFRESH_URL.sub(lambda m: m.group(1) + self.path(m.group(2)), value))

    def challenge(self, value: str) -> str:
        """A `WWW-Authenticate` value with its schemes and parameters shown (`Bearer error="invalid_token",
        resource_metadata="..."`) and any bare token after a scheme (`Negotiate <token>`: a handshake
        leg) masked, as are known secret texts."""
        pieces = []
        for piece in value.split(","):
            match = _CHALLENGE_TOKEN.fullmatch(piece)
            pieces.append(f"{match.group(1)}{self.token(match.group(2))}" if match else piece)
        return self.scrub(",".join(pieces))

    def token(self, value: str) -> str:
        """Return the `<redacted len=N hmac:xxxxxxxx>` stand-in for any secret (session ids, credentials)."""
        shown = self._tokens.get(value)
        if shown is None:
            # Memo: the same session id is masked several times per exchange; bounded like the above.
            if len(self._tokens) >= _TOKEN_MEMO:
                self._tokens.clear()
            shown = self._tokens[value] = _stand_in(self._key, "redacted", value)
        return shown

    def fingerprint(self, value: str) -> str:
        """A keyed 16-hex fingerprint of an identity (a principal), to tell identities apart in views."""
        return keyed_digest(self._key, value)[:16]

    def path(self, target: str) -> str:
        """A request target or URL with the values of credential-like query parameters masked
        (`?token=...`), and those of its fragment too (`#access_token=...`: an authorization server
        answering with `response_mode=fragment` puts the tokens there).

        Parameter names are judged like header names, and a masked value is remembered like a secret
        header's (a server may echo the target); known secret texts are masked anywhere in it.
        """
        url, hash_mark, fragment = target.partition("#")
        base, q, query = url.partition("?")
        if "@" in base:  # an absolute-form target's userinfo is a credential, with or without a colon
            base = _USERINFO.sub(lambda m: f"{m.group(1)}{self._userinfo(m.group(2))}@", base, count=1)
        shown = f"{base}?{self._fields(query)}" if q else base
        if hash_mark:
            shown = f"{shown}#{self._fragment(fragment)}"
        return self.scrub(shown)

    def _userinfo(self, userinfo: str) -> str:
        """The stand-in of a URL's `user:password`, remembered as sent and decoded, and the password
        alone unless it could be a word (as a Basic credential's): the same message, or a later one,
        may carry the URL, or the password, where no name says it is a credential. A userinfo is a
        secret whatever its length: a short one is kept for the places it cannot be part of a word."""
        decoded = unquote(userinfo)
        for text in (userinfo, decoded):
            if len(text) >= MIN_ECHOED_SECRET:
                self._remember(text)
            else:
                self._remember_short(text, True)
        _user, colon, password = decoded.partition(":")
        if colon and len(password) < MIN_ECHOED_SECRET:
            self._remember_short(password, False)
        elif colon and not password.isalpha():
            self._remember(password)
        return self.token(userinfo)

    def _remember_short(self, text: str, userinfo: bool) -> None:
        """Mask a short userinfo where a URL carries it again, or a short password where a whole value
        is exactly it (`ShortSecrets`): masked wherever it appears, it would blot out words."""
        if userinfo:
            self._short.add_userinfo(text)
        else:
            self._short.add_value(text)
        self._header_memo.clear()  # a head masked before may hold it

    def _fragment(self, fragment: str) -> str:
        """A URL's fragment with its credential-like `name=value` pairs masked as a query's are; in a
        client-side route (`#/callback?code=...`) the pairs are those after its `?`."""
        route, q, pairs = fragment.rpartition("?") if "?" in fragment else ("", "", fragment)
        return f"{route}{q}{self._fields(pairs)}"

    def _fields(self, query: str) -> str:
        """A query or form-encoded body with the values of credential-like fields masked (and remembered)."""
        parts = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            if eq and value and self.is_secret_header(key := unquote_plus(name)):
                value = self._query_value(key.lower(), value)
            parts.append(f"{name}{eq}{value}")
        return "&".join(parts)

    def target(self, target: str) -> str:
        """An HTTP request target as `path` masks it, with credential-like path segments masked too
        (`/mcp/sk-ak-.../sse`: a gateway's key in the path, `proxy.wire.path_keys`), each remembered
        as sent and as decoded, since a server may echo it."""
        url, hash_mark, fragment = target.partition("#")
        base, q, query = url.partition("?")
        if len(base) > CREDENTIAL_PIECE:
            base = mask_target_segments(base, self._path_key)
        return self.path(f"{base}{q}{query}{hash_mark}{fragment}")

    def _path_key(self, segment: str) -> str:
        """The stand-in of a key in a path. One with a digit in it is remembered, as sent and decoded:
        random keys nearly always have one, while a long camel-case name read as a key
        (`getUserProfileData`) is masked in the path but not everywhere else it appears."""
        decoded = unquote(segment)
        if any(c.isdigit() for c in decoded):
            self._remember(segment)
            self._remember(decoded)
        return self.token(decoded)

    def _query_value(self, key: str, value: str) -> str:
        """The stand-in of a secret query value, remembered as sent and as decoded (either may be echoed)."""
        decoded = unquote_plus(value)
        if _echoes(key):
            self._remember(value)
            self._remember(decoded)
        return self.token(decoded)

    # -- bodies ------------------------------------------------------------------------------

    def body(self, value: Any) -> Any:
        """Return a JSON-RPC message with `requestState`, secret keys and known secret texts masked; the
        input itself if none.

        The secret keys are masked first, which remembers their values, and known texts are scrubbed
        after: a value the same message also carries elsewhere (a tool's `text` argument repeating its
        `password`) is masked there too, not only in the messages after it.
        """
        if isinstance(value, str):  # a body that was not JSON-RPC, kept as text
            return self.text_body(value)
        if not isinstance(value, dict | list) or not value:
            return value
        secret = self._foreign_key if _foreign(value) else self.is_secret_key
        value = _walk(value, secret, self._mask_body_value)
        return self._scrub_body(value) if self._json_texts or self._short.any else value

    def _scrub_body(self, value: Any) -> Any:
        """The body with known secret texts in its strings masked (the input itself if none is in it)."""
        try:
            encoded = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # orjson.JSONEncodeError: the walk and bound_body report it
            return value
        scrubbed = self._scrub_json(encoded)
        return value if scrubbed is None else orjson.loads(scrubbed)

    def _scrub_json(self, encoded: bytes) -> bytes | None:
        """Compact JSON with known secret texts masked inside its strings; None when none is in it."""
        found = False
        for text, stand_in in self._json_texts:
            if text in encoded:
                encoded, found = encoded.replace(text, stand_in), True
        short = self._short.scrub_json(encoded, self.token) if self._short.any else None
        return short if short is not None else encoded if found else None

    def is_secret_key(self, key: str) -> bool:
        """Whether a body member's value is masked: `requestState` (any case), or a key holding a
        configured key's words in a row, however they are joined or cased."""
        known = self._key_memo.get(key)
        if known is None:
            known = key.lower() in self._state_keys
            if not known and self._body_words:
                words = key_words(key)
                known = any(_holds(words, wanted) for wanted in self._body_words)
            if len(self._key_memo) >= _KEY_MEMO:
                self._key_memo.clear()
            self._key_memo[key] = known
        return known

    def _foreign_key(self, key: str) -> bool:
        """Whether a member of a body that is not JSON-RPC is masked: a secret key, or an OAuth one."""
        return joined_words(key) in _OAUTH_JOINED or self.is_secret_key(key)

    def text_body(self, text: str) -> str:
        """A body that is not JSON-RPC (kept as text for the record), with what looks like a member
        named like a secret key masked as the JSON walk masks it (an object whole, an array's items
        each, a schema's `properties` member gone through) and known secret texts masked, so a
        malformed body never carries in clear what the same body well-formed would not. A
        form-encoded body (an OAuth token request) has its credential-like fields masked and
        remembered as a query's are."""
        stripped = text.rstrip()
        if _FORM.fullmatch(stripped):
            text = self._fields(stripped) + text[len(stripped) :]
        pieces: list[str] = []
        done = 0
        for member in secret_members(text, self._foreign_key):
            shown = self._text_value(member, text[member.start : member.end])
            if shown is not None:
                pieces += [text[done : member.start], shown]
                done = member.end
        pieces.append(text[done:])
        return self.scrub("".join(pieces))

    def _text_value(self, member: Member, value: str) -> str | None:
        """A secret member's value in a text body, masked (None: kept, a schema gone through). A value
        that reads as JSON is masked as the walk masks it; one cut short or not JSON is masked whole,
        and a string's text remembered as the walk remembers it: the upstream may have read the body
        the proxy could not, and echo the value."""
        if value.startswith("{") and member.schema_member:
            return None
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            inner = value.removeprefix('"')
            inner = inner.removesuffix('"') if len(inner) < len(value) else inner
            if len(inner) < len(value):
                self._remember(inner)
            return f'"{self.token(inner)}"'
        return orjson.dumps(self._mask_body_value(member.name, parsed, member.schema_member)).decode()

    def _mask_body_value(self, key: str, value: Any, schema_member: bool) -> Any:
        """A secret key's value masked: a string, a number or an object is the secret, masked whole
        (an operator who names a key means its value, whatever its shape); an array has each of its
        items masked so, an array in it whole too; a flag or a null is no secret.

        One object is given back for the walk to go through instead: a member of a JSON Schema's
        `properties` (`schema_member`: the object holding the key is the value of a member named
        `properties`), as in a tool's `inputSchema.properties.password = {"type": "string"}`, which
        describes the secret and holds none (masked, a mock would serve a stand-in as a schema). A
        `requestState` is masked whatever it is and wherever it is: it is opaque to the client."""
        if value is None:
            return None
        if key.lower() in self._state_keys:
            text = value if isinstance(value, str) else _encode_for_mask(value)
            return _stand_in(self._key, REQUEST_STATE_KEY, text)
        if schema_member and isinstance(value, dict):
            return value
        if isinstance(value, list):
            items = [self._mask_secret(item) for item in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return self._mask_secret(value)

    def _mask_secret(self, value: Any) -> Any:
        """One secret value's stand-in: a string remembered (a server echoing it shows it masked), a
        number, an object or an array masked as its JSON text; a flag or a null given back."""
        if value is None or isinstance(value, bool):
            return value
        if not isinstance(value, str):
            return self.token(_encode_for_mask(value))
        if value.startswith("<redacted len=") and _A_STAND_IN.fullmatch(value):
            return value  # masked already as a known secret text: masked again it would hide its length
        self._remember(value)
        return self.token(value)

    # -- size --------------------------------------------------------------------------------

    @staticmethod
    def bound(value: Any, limit: int) -> tuple[Any, bool, int]:
        """Same as `bound_body`: cap a body for observers at `limit` bytes of compact JSON."""
        return bound_body(value, limit)

    def body_bounded(self, value: Any, limit: int) -> tuple[Any, bool, int]:
        """`bound(body(value), limit)`, encoding the value once when nothing in it can need masking.

        The masking walk visits every key; most messages hold no secret key, which their compact JSON
        shows at a glance: no `"<key>":` in it (ASCII case-insensitively) means no key that lower-cases
        to a secret key. (Of all non-ASCII characters only the Kelvin sign lower-cases to an ASCII letter,
        so its presence, or a configured key that is not plain ASCII, sends the value down the walk.)
        """
        shown, truncated, size, _encoded = self._bound_encoded(value, limit)
        return shown, truncated, size

    def body_for_capture(self, value: Any, limit: int) -> tuple[Any, bool, bytes | None]:
        """`body_bounded` for a capture line: (value, truncated, its compact JSON when that is at hand).

        The JSON text comes back when the value needed no masking and fits the limit, so the caller
        can embed it instead of encoding the value again; otherwise it is None.
        """
        shown, truncated, _size, encoded = self._bound_encoded(value, limit)
        return shown, truncated, encoded

    def _bound_encoded(self, value: Any, limit: int) -> tuple[Any, bool, int, bytes | None]:
        if self._secret_member is None or not isinstance(value, dict | list) or not value or _foreign(value):
            return (*bound_body(self.body(value), limit), None)
        try:
            encoded = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # orjson.JSONEncodeError: the walk and bound_body report it
            return (*bound_body(self.body(value), limit), None)
        masked = False
        if _KELVIN in encoded or self._secret_member.search(encoded):
            walked = _walk(value, self.is_secret_key, self._mask_body_value)  # learns before the scrub
            if walked is not value:
                value, encoded, masked = walked, orjson.dumps(walked, option=orjson.OPT_NON_STR_KEYS), True
        if (self._json_texts or self._short.any) and (scrubbed := self._scrub_json(encoded)) is not None:
            value, encoded = orjson.loads(scrubbed), scrubbed
        shown, truncated, size = _bounded(value, encoded, limit)
        return shown, truncated, size, None if truncated or masked else encoded


_HEADER_MEMO: Final = 256
"""Most masked header sets a Redactor remembers (a few clients, each sending the same heads)."""

_TOKEN_MEMO: Final = 4096
"""Most stand-ins a Redactor remembers (secrets repeat: a session id is masked on every exchange)."""

_KELVIN: Final = "\u212a".encode()
"""UTF-8 of the Kelvin sign, the one non-ASCII character whose lower case is an ASCII letter (k)."""


_KEY_MEMO: Final = 4096
"""Most body member names a Redactor remembers its verdict on."""

_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\x00-\x7f]+")
"""The words of a member name: `apiKey`, `API_Key` and `api-key` are all `api`, `key`."""


def _foreign(value: Any) -> bool:
    """Whether a decoded body is JSON that is not JSON-RPC (an OAuth endpoint's answer, say): an
    object, or an array holding one, without a `jsonrpc` member."""
    if isinstance(value, dict):
        return "jsonrpc" not in value
    return isinstance(value, list) and any(isinstance(item, dict) and "jsonrpc" not in item for item in value)


def _one_credential(key: str, piece: str) -> bool:
    """Whether a piece of a secret header's value between two `, ` may be one value of a field sent more
    than once (recorded joined), to remember on its own: any piece, but of an `Authorization` only a
    scheme and a bare token (`Bearer abc`), never one parameter of an auth-param list (`realm="r"`)."""
    if not key.endswith("authorization"):
        return True
    match = _SCHEME_RE.fullmatch(piece.strip())
    return match is not None and _BARE_CREDENTIAL.fullmatch(match.group(3)) is not None


def _echoes(name: str) -> bool:
    """Whether a secret of this (lower-case) header or query parameter name is remembered for echoes:
    not a cookie, a proof, or a session id (`session` named without a credential's word)."""
    if any(word in name for word in _NOT_ECHOED):
        return False
    return "session" not in name or any(word in name for word in _CREDENTIAL_WORDS)


def key_words(key: str) -> tuple[str, ...]:
    """A member name's words in lower case (`db_Password` -> `db`, `password`)."""
    return tuple(word.lower() for word in _WORD.findall(key))


@functools.lru_cache(maxsize=_KEY_MEMO)
def joined_words(name: str) -> str:
    """A name's words run together in lower case (`accessToken`, `ACCESS-TOKEN` -> `accesstoken`): how
    a header, query parameter, form field or OAuth member name is compared with a listed one."""
    return "".join(key_words(name))


_OAUTH_JOINED: Final = frozenset(joined_words(key) for key in OAUTH_BODY_KEYS)


def _holds(words: tuple[str, ...], wanted: str) -> bool:
    """Whether a run of `words` reads `wanted` (`access token` holds `token`; `max tokens` does not)."""
    for start in range(len(words)):
        run = ""
        for word in words[start:]:
            run += word
            if len(run) >= len(wanted):
                if run == wanted:
                    return True
                break
    return False


_JSON_SEPARATOR: Final = rb"(?:[^A-Za-z0-9\x80-\xff\\]|\\(?:[^u]|u[0-9A-Fa-f]{4}))*"
r"""Any run of what `key_words` splits words on, as compact JSON writes it: punctuation, spaces and
JSON's escapes (`\"`, `\n`, `\u0001`), none of them a letter, digit or non-ASCII character."""


def _member_pattern(exact: frozenset[str], joined: tuple[str, ...]) -> re.Pattern[bytes] | None:
    """Finds, ASCII case-insensitively and without a copy, what may be a member named like a secret
    key in compact JSON: an exact name, or a configured key's letters anywhere, any run of separators
    allowed between any two, as the walk's `key_words` allows (`API__KEY`, `api::key`, `api/key`), so
    the pre-filter never passes a body the walk would mask (a hit only sends the body down the walk,
    which decides). None when a name is not plain ASCII: then every body takes the walk.
    """
    if not exact and not joined:
        return None
    if not all(key.isascii() for key in (*exact, *joined)):
        return None
    names = [re.escape(orjson.dumps(key)) + b":" for key in sorted(exact)]
    names += [_JSON_SEPARATOR.join(re.escape(c.encode()) for c in key) for key in joined]
    return re.compile(b"|".join(names), re.IGNORECASE)


def _children(node: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def _walk(
    root: dict[Any, Any] | list[Any],
    secret: Callable[[str], bool],
    mask: Callable[[str, Any, bool], Any],
) -> Any:
    """Copy-on-write walk, iterative so that no nesting depth can exhaust the Python stack.

    `mask` gets a secret member's key, its value, and whether the object holding it is the value of
    a member named `properties` (a JSON Schema's). What it gives back is walked in turn, so an object
    it keeps (such a schema) has its own secret members masked.

    Unchanged containers are returned as the very same objects; only the path from the root down to
    a masked value is copied.
    """
    # Each frame: container, its child iterator, replacements found so far, key in the parent.
    stack: list[tuple[Any, Iterator[tuple[Any, Any]], dict[Any, Any], Any]] = [
        (root, _children(root), {}, None)
    ]
    result: Any = root
    while stack:
        node, children, changes, node_key = stack[-1]
        descended = False
        is_dict = isinstance(node, dict)
        in_properties = is_dict and node_key == SCHEMA_PROPERTIES
        for k, v in children:
            if is_dict and isinstance(k, str) and secret(k):
                masked = mask(k, v, in_properties)
                if masked is not v:
                    changes[k] = masked
                v = masked  # an object or array `mask` gave back is walked in turn
            if isinstance(v, dict | list) and v:
                stack.append((v, _children(v), {}, k))
                descended = True
                break
        if descended:
            continue
        _, _, _, key_in_parent = stack.pop()
        new = node
        if changes:
            if is_dict:
                new = {k: changes.get(k, v) for k, v in node.items()}
            else:
                new = list(node)
                for i, v in changes.items():
                    new[i] = v
        if stack:
            if new is not node:
                stack[-1][2][key_in_parent] = new
        else:
            result = new
    return result


TRUNCATED_KEY: Final = "$truncated"
"""Marker key of a body replaced by a preview because it exceeded the capture limit."""

UNENCODABLE_KEY: Final = "$unencodable"
"""Marker key of a body that could not be encoded as JSON (e.g. nested deeper than orjson allows)."""


class CutBody(dict[str, Any]):
    """A capture's stand-in for a body it cut at its limit or could not encode (`bound_body`'s
    marker), as read back.

    The capture line says the body was cut (`msg.truncated`); the stand-in itself is small, so bounding
    it again would call it whole. Read back as this type, it keeps saying so: `AlreadyRedacted` marks
    its record truncated and the HAR entry says its body was cut, as the running proxy's own record
    does. A peer's body that merely looks like a stand-in is read as a plain dict.
    """

    __slots__ = ()


def unencodable(body: Any) -> bool:
    """Whether a recorded body is `bound_body`'s stand-in for one it could not encode, which is also
    marked truncated but was not cut at the capture limit (it was never JSON text to cut)."""
    return isinstance(body, dict) and body.get(UNENCODABLE_KEY) is True


def bound_body(value: Any, limit: int) -> tuple[Any, bool, int]:
    """Cap a body for observers: `(value, False, size)` if it fits in `limit` bytes, else a preview marker.

    `size` is the byte length of the compact JSON encoding. Over the limit the body becomes
    `{"$truncated": True, "size": size, "preview": <at most limit bytes of the JSON text>}` (a
    multi-byte character cut at the limit is dropped). `limit <= 0` means no limit. A value that
    cannot be encoded becomes `{"$unencodable": True, "error": ...}` with size 0, so an odd body
    never breaks an observer. Redact first (`Redactor.body`), then bound: the preview is raw JSON text.
    """
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:  # orjson.JSONEncodeError
        return {UNENCODABLE_KEY: True, "error": str(exc)}, True, 0
    return _bounded(value, encoded, limit)


def _bounded(value: Any, encoded: bytes, limit: int) -> tuple[Any, bool, int]:
    """`bound_body` given the value's compact JSON encoding."""
    size = len(encoded)
    if limit <= 0 or size <= limit:
        return value, False, size
    preview = encoded[:limit].decode("utf-8", "ignore")
    return {TRUNCATED_KEY: True, "size": size, "preview": preview}, True, size


class AlreadyRedacted(Redactor):
    """A redactor for data that was redacted when it was recorded (a capture's facts, read back).

    Masking a stand-in again would show the stand-in's own length and hash instead of the secret's.
    """

    def __init__(self) -> None:
        super().__init__(header_names=(), header_patterns=())

    def headers(self, items: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
        """The headers as they are (joined like `Redactor.headers`); a mapping read from a capture was
        joined when it was recorded, so it is copied as it is."""
        return dict(items) if isinstance(items, Mapping) else joined(tuple(items))

    def token(self, value: str) -> str:
        """The value as it is."""
        return value

    def body(self, value: Any) -> Any:
        """The body as it is."""
        return value

    def text_body(self, text: str) -> str:
        """The text as it is."""
        return text

    def body_bounded(self, value: Any, limit: int) -> tuple[Any, bool, int]:
        """The body as it is, bounded; a body the capture cut (`CutBody`) stays truncated."""
        shown, truncated, size = bound_body(value, limit)
        return shown, truncated or isinstance(value, CutBody), size

    def fingerprint(self, value: str) -> str:
        """The fingerprint as it was recorded."""
        return value

    def path(self, target: str) -> str:
        """The target as it was recorded."""
        return target

    def target(self, target: str) -> str:
        """The target as it was recorded."""
        return target
