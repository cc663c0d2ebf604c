"""`pulsar-ref tokens`: keys and tokens for token authentication, as `pulsar tokens` makes them."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_DURATION = re.compile(r"^(\d+)([smhdy]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


def duration_s(text: str) -> float:
    found = _DURATION.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 10m, 1h, 7d or 1y")
    return int(found.group(1)) * _UNIT_S[found.group(2)]


def _write(path: str, data: bytes) -> None:
    target = Path(path)
    target.write_bytes(data)
    target.chmod(0o600)


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Make keys and tokens for token authentication.")
    verbs = parser.add_subparsers(dest="verb", required=True)
    secret = verbs.add_parser("create-secret-key", help="a new secret key (HS256), written to --output")
    secret.add_argument("--output", required=True, help="file to write the key to (mode 600)")
    pair = verbs.add_parser("create-key-pair", help="a new RSA key pair (RS256)")
    pair.add_argument("--output-private-key", required=True, help="the signing key (PEM; keep it secret)")
    pair.add_argument("--output-public-key", required=True, help="the key brokers check tokens with (PEM)")
    create = verbs.add_parser("create", help="a token for a role, printed on stdout")
    create.add_argument("--subject", required=True, help="the role the token names (its 'sub' claim)")
    create.add_argument("--secret-key", metavar="FILE", help="sign with this secret key (HS256)")
    create.add_argument("--private-key", metavar="FILE", help="sign with this RSA private key (RS256)")
    create.add_argument("--expiry-time", type=duration_s, help="lifetime, e.g. 1h or 30d (default: no expiry)")
    validate = verbs.add_parser("validate", help="check a token; print its role")
    validate.add_argument("token")
    validate.add_argument("--secret-key", metavar="FILE", help="the secret key (HS256)")
    validate.add_argument("--public-key", metavar="FILE", help="the RSA public key (RS256)")
    args = parser.parse_args(argv)

    from impl.security import tokens

    try:
        if args.verb == "create-secret-key":
            _write(args.output, tokens.create_secret_key())
        elif args.verb == "create-key-pair":
            private, public = tokens.create_key_pair()
            _write(args.output_private_key, private)
            Path(args.output_public_key).write_bytes(public)
        elif args.verb == "create":
            if bool(args.secret_key) == bool(args.private_key):
                parser.error("create needs exactly one of --secret-key or --private-key")
            key = tokens.read_key(args.secret_key or args.private_key)
            if args.secret_key:
                token = tokens.create_token(args.subject, secret_key=key, expires_in_s=args.expiry_time)
            else:
                token = tokens.create_token(args.subject, private_key=key, expires_in_s=args.expiry_time)
            print(token)
        else:
            if bool(args.secret_key) == bool(args.public_key):
                parser.error("validate needs exactly one of --secret-key or --public-key")
            if args.secret_key:
                authenticator = tokens.TokenAuthenticator(secret_key=tokens.read_key(args.secret_key))
            else:
                authenticator = tokens.TokenAuthenticator(public_key=tokens.read_key(args.public_key))
            print(authenticator.authenticate(args.token))
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except tokens.AuthenticationFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # a key file that holds no usable key
        print(f"error: {e}; give the key file that tokens create-secret-key / create-key-pair wrote", file=sys.stderr)
        return 2
    return 0
