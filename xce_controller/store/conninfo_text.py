"""A PostgreSQL connection string fit for a message: its password hidden.

Both of libpq's forms are read the way libpq reads them, so a password is hidden whole:
`key=value` pairs (a value may be single-quoted, with `\\'` and `\\\\` inside, or bare up to
the next space) and URIs (`postgresql://user:password@host/db?password=...`). Where the
string is malformed, the reading leans towards hiding too much: a word left without `=` after
a password is taken for the rest of it (`password=S3 cret`), and a URI's credentials run to
its last `@` before the path or query. libpq's own parse errors quote pieces of the string,
so `scrub` takes the same pieces out of a message.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"
_URI = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
_SECRET = re.compile(r"pa?ss?w|pass|pwd")  # password, sslpassword, pasword, PASSWD, pwd...
_SPACE = " \t\n\r\f\v"  # libpq's isspace() in the C locale, not str.isspace()

Span = tuple[int, int]


def hide_password(conninfo: str) -> str:
    """`conninfo` with every password value replaced by ***."""
    shown: list[str] = []
    end = 0
    for start, stop in _secret_spans(conninfo):
        shown.append(conninfo[end:start] + HIDDEN)
        end = stop
    return "".join(shown) + conninfo[end:]


def scrub(message: str, *conninfos: str) -> str:
    """`message` (libpq's words about the connection strings) without any piece of their
    passwords, anywhere: libpq quotes what it could not read, but a quote may be in a password."""
    secrets: set[str] = set()
    for conninfo in conninfos:
        message = message.replace(conninfo, hide_password(conninfo))
        secrets.update(conninfo[a:b] for a, b in _secret_spans(conninfo))
    for secret in sorted(secrets - {""}, key=len, reverse=True):  # a longer may hold a shorter
        message = message.replace(secret, HIDDEN)
    return message


def misplaced_at(conninfo: str) -> bool:
    """A URI with an `@` that libpq would read otherwise than meant: a second one before the
    path (inside the user name or password), or one in the path (after a `/` inside the
    password, or in the database name). libpq would end the password early and take its rest
    for the host or the port, and quote that in its error."""
    found = _URI.match(conninfo)
    if not found:
        return False
    path = _find(conninfo, "/", found.end())
    query = _find(conninfo, "?", path)
    return conninfo.count("@", found.end(), path) > 1 or "@" in conninfo[path:query]


def _find(text: str, char: str, start: int) -> int:
    """Where `char` is from `start` on, or the end of `text`."""
    at = text.find(char, start)
    return at if at >= 0 else len(text)


def is_secret(keyword: str) -> bool:
    """A keyword whose value is a password: also a miscased or misspelt one (`PASSWORD`,
    `pasword`), which libpq refuses but which still holds one; `passfile` is a path."""
    word = keyword.lower()
    return word != "passfile" and _SECRET.search(word) is not None


def _secret_spans(conninfo: str) -> list[Span]:
    found = _URI.match(conninfo)
    if found:
        return _uri_spans(conninfo, found.end())
    return _keyword_spans(conninfo)


def _uri_spans(uri: str, start: int) -> list[Span]:
    spans: list[Span] = []
    at = _credentials_end(uri, start)
    if at >= 0:
        colon = uri.find(":", start, at)
        if colon >= 0:
            spans.append((colon + 1, at))
    query = uri.find("?", max(at + 1, start))
    if query >= 0:
        spans.extend(_query_spans(uri, query + 1))
    return spans


def _credentials_end(uri: str, start: int) -> int:
    """The `@` that ends the user and password, or -1. libpq takes the first `@` before the
    path; an unescaped `@`, `/` or `?` inside a password would show its rest, so the last `@`
    before the path or before the query is taken, whichever comes later."""
    path, query = (uri.find(c, start) for c in "/?")
    before_path = uri.rfind("@", start, path if path >= 0 else len(uri))
    before_query = uri.rfind("@", start, query if query >= 0 else len(uri))
    return max(before_path, before_query)


def _query_spans(uri: str, start: int) -> list[Span]:
    spans: list[Span] = []
    for match in re.finditer(r"([^&=]*)=([^&]*)", uri[start:]):
        if is_secret(unquote(match.group(1))):
            spans.append((start + match.start(2), start + match.end(2)))
    return spans


def _keyword_spans(text: str) -> list[Span]:
    spans: list[Span] = []
    after_secret = False
    i = _skip_space(text, 0)
    while i < len(text):
        word_end = _word_end(text, i)
        eq = _skip_space(text, word_end)
        if eq >= len(text) or text[eq] != "=":
            # A word with no `=` (libpq refuses the string): after a password, a piece of it.
            if after_secret:
                spans.append((i, word_end))
            i = eq
            continue
        value = _skip_space(text, eq + 1)
        value_end = _value_end(text, value)
        after_secret = is_secret(text[i:word_end])
        if after_secret:
            spans.append((value, value_end))
        i = _skip_space(text, value_end)
    return spans


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _word_end(text: str, i: int) -> int:
    while i < len(text) and text[i] not in _SPACE and text[i] != "=":
        i += 1
    return i


def _value_end(text: str, i: int) -> int:
    """Where the value starting at `i` ends: a quoted one after its closing quote (or at the
    end, unterminated), a bare one at the next space; a backslash escapes the next character
    in either."""
    quoted = i < len(text) and text[i] == "'"
    if quoted:
        i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif quoted and text[i] == "'":
            return i + 1
        elif not quoted and text[i] in _SPACE:
            return i
        else:
            i += 1
    return len(text)
