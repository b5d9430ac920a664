"""A connection string in a message: its password hidden whole in both of libpq's forms, the
rest shown as given; libpq's parse errors rid of the pieces they quote."""

from __future__ import annotations

import pytest

from xce_controller.store.conninfo_text import misplaced_at, scrub
from xce_controller.store.open import describe


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("host=db password=s3cret dbname=xce", "host=db password=*** dbname=xce"),
        ("host=db password='S3 cretPw' dbname=xce", "host=db password=*** dbname=xce"),
        (r"host=db password='it\'s a pw' dbname=xce", "host=db password=*** dbname=xce"),
        (r"host=db password='back\\slash\\' dbname=xce", "host=db password=*** dbname=xce"),
        (r"host=db password=bare\ space dbname=xce", "host=db password=*** dbname=xce"),
        ("host=db password = 'a b' dbname=xce", "host=db password = *** dbname=xce"),
        ("host=db\tpassword='a\tb'\tdbname=xce", "host=db\tpassword=***\tdbname=xce"),
        ("host=db password='' dbname=xce", "host=db password=*** dbname=xce"),
        ("host=db password='unterminated dbname=xce", "host=db password=***"),
        ("host=db PASSWORD='a b' dbname=xce", "host=db PASSWORD=*** dbname=xce"),
        ("host=db pasword=s3cret", "host=db pasword=***"),
        ("host=db sslpassword='k e y'", "host=db sslpassword=***"),
        # An unquoted password with a space: libpq refuses it, its second word is still hidden.
        ("host=db password=S3 cretPw more dbname=xce", "host=db password=*** *** *** dbname=xce"),
        (
            "host=db passfile=/etc/xce/pgpass dbname=xce",
            "host=db passfile=/etc/xce/pgpass dbname=xce",
        ),
        ("host=db dbname='my db'", "host=db dbname='my db'"),
    ],
)
def test_a_keyword_password_is_hidden_whole(given: str, shown: str) -> None:
    assert describe(given) == shown


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://xce:s3cret@db/xce", "postgresql://xce:***@db/xce"),
        ("postgres://xce:s3cret@db:5432/xce", "postgres://xce:***@db:5432/xce"),
        ("postgresql://xce:p%40ss%3Aw%25d@db/xce", "postgresql://xce:***@db/xce"),
        ("postgresql://xce:pa:ss:wd@db/xce", "postgresql://xce:***@db/xce"),
        ("postgresql://xce:p@ss@db/xce", "postgresql://xce:***@db/xce"),
        ("postgresql://xce:a/b+c@db/xce", "postgresql://xce:***@db/xce"),
        ("postgresql://xce:p?q@db/xce", "postgresql://xce:***@db/xce"),
        ("postgresql://xce:pw@h1:5432,h2:5433/xce", "postgresql://xce:***@h1:5432,h2:5433/xce"),
        ("POSTGRESQL://xce:s3cret@db/xce", "POSTGRESQL://xce:***@db/xce"),
        (
            "postgresql://db/xce?sslmode=require&password=s3%20cret&user=xce",
            "postgresql://db/xce?sslmode=require&password=***&user=xce",
        ),
        ("postgresql://xce:pw@db/xce?user=a@b", "postgresql://xce:***@db/xce?user=a@b"),
        ("postgresql://xce@db/xce", "postgresql://xce@db/xce"),
        ("postgresql://db:5432/xce", "postgresql://db:5432/xce"),
        ("postgresql://[::1", "postgresql://[::1"),
    ],
)
def test_a_uri_password_is_hidden_whole(given: str, shown: str) -> None:
    assert describe(given) == shown


def test_a_file_is_shown_as_it_is() -> None:
    assert describe("/var/lib/xce/controller.db") == "/var/lib/xce/controller.db"
    assert describe("host=db password='S3 cretPw'") == "host=db password=***"


@pytest.mark.parametrize(
    ("message", "conninfo", "secret"),
    [
        ('missing "=" after "cretPw" in connection info string', "password=S3 cretPw", "cretPw"),
        ('invalid percent-encoded token: "p%zzw"', "postgresql://u:p%zzw@db/xce", "p%zzw"),
        (
            'end of string reached in URI: "postgresql://u:s3cret@[::1"',
            "postgresql://u:s3cret@[::1",
            "s3cret",
        ),
    ],
)
def test_libpq_words_lose_the_pieces_they_quote(message: str, conninfo: str, secret: str) -> None:
    cleaned = scrub(message, conninfo)
    assert secret not in cleaned and "***" in cleaned


def test_a_message_without_a_password_is_left_as_it_is() -> None:
    message = 'invalid connection option "dbnme"'
    assert scrub(message, "host=db password=s3cret dbnme=xce") == message


@pytest.mark.parametrize(
    ("conninfo", "misplaced"),
    [
        ("postgresql://xce:p@ss@db/xce", True),
        ("postgresql://xce:a/b@db/xce", True),
        ("postgresql://xce:pw@db/d@b", True),
        ("postgresql://xce:p%40ss@db/xce", False),
        ("postgresql://xce:pw@db/xce?user=a@b", False),
        ("postgresql://xce:p?q@db/xce", False),
        ("host=db password=p@ss@word", False),
    ],
)
def test_an_unescaped_at_that_would_cut_a_password_is_found(conninfo: str, misplaced: bool) -> None:
    assert misplaced_at(conninfo) is misplaced
