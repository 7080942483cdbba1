"""Start-up checks of where a table lives: each failure is one line saying which check failed and what to do.

On S3, in this order:
1. the bucket answers (HeadBucket): the endpoint is reachable, the bucket exists, the credentials are accepted;
2. the credentials can write: a probe object under `<table>/_lakesink/<connector>/probe/` is put and deleted;
3. the store honours conditional writes: of two `If-None-Match: *` puts of one probe key the second is refused.
   Every Delta commit lakesink makes on S3 is such a put (docs/ARCHITECTURE.md, "Object storage"): on a store that
   ignores the condition two coordinators could both win one log version, so lakesink does not write there.

The requests use short timeouts and no retries, and the whole check stops after `BUDGET_S`, so an unreachable
store fails start-up within seconds instead of after a retry loop. A local table needs only a writable directory.
"""
from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from connector.errors import SetupError
from connector.storage.store import Store, name_taken

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 3.0
BUDGET_S = 10.0
"""No new request starts after this many seconds; with one request's timeouts the check ends within ~15 s."""
PROBE_BODY = b"lakesink start-up probe: safe to delete\n"
CHECKS = ("bucket answers", "credentials can write", "conditional writes honoured")


def check_store(store: Store, connector: str, *, conditional: bool = True) -> None:
    """Raise SetupError (one line) unless lakesink can work at `store`'s root: see the module's docstring."""
    if store.root.is_s3:
        _S3Check(store, connector).run(conditional)
    else:
        _check_local(Path(store.root.key))


def passed(store: Store, *, conditional: bool = True) -> str:
    """What a passing check_store proved, for a status line."""
    if not store.root.is_s3:
        return "directory writable"
    return ", ".join(CHECKS if conditional else CHECKS[:2])


def _check_local(table_dir: Path) -> None:
    existing = table_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SetupError(f"table {table_dir}: {existing} is a file, not a directory: choose another "
                         f"target.base.path")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".lakesink-probe-"):
            pass
    except OSError as exc:
        raise SetupError(f"table {table_dir}: cannot write in {existing} ({exc.strerror or exc}): give the user "
                         f"lakesink runs write access there, or choose another target.base.path") from None


class _S3Check:
    def __init__(self, store: Store, connector: str):
        self.store = store
        self.bucket = store.root.bucket
        self.uri = store.root.delta_uri
        self.where = store.s3.endpoint or f"AWS S3 ({store.s3.effective_region or 'the default region'})"
        self.client = store.s3.client(connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S, attempts=1)
        self.probe_dir = f"{store.root.key}/_lakesink/{connector}/probe".lstrip("/")
        self.deadline = time.monotonic() + BUDGET_S
        self.written: set[str] = set()

    @property
    def who(self) -> str:
        key_id = self.store.s3.access_key
        return f"aws.access.key.id={key_id}" if key_id else "the default AWS credential chain's credentials"

    def run(self, conditional: bool) -> None:
        try:
            self.bucket_answers()
            self.credentials_can_write()
            if conditional:
                self.conditional_writes_honoured()
        finally:
            self.clean_up()

    # --- the checks ------------------------------------------------------------------------------------------

    def bucket_answers(self) -> None:
        error = self.call("bucket answers", self.client.head_bucket, Bucket=self.bucket)
        if error is None:
            return
        status, code = _status(error), _code(error)
        if not _from_s3(error):
            raise SetupError(f"storage {self.uri}: {self.where} is not an S3 endpoint (it answered HeadBucket with "
                             f"HTTP {status} and no x-amz-* header): check s3.endpoint")
        if status == 404 or code in ("404", "NoSuchBucket"):
            raise SetupError(f"storage {self.uri}: bucket {self.bucket} does not exist at {self.where}: create it, or "
                             f"fix the bucket in target.base.path (or s3.endpoint)")
        if status == 403:
            raise SetupError(f"storage {self.uri}: {self._forbidden()}")
        if status == 301:
            region = error.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
            raise SetupError(f"storage {self.uri}: bucket {self.bucket} is in another region"
                             f"{f' ({region})' if region else ''} than s3.region={self.store.s3.effective_region}: "
                             f"set s3.region{f'={region}' if region else ''}")
        raise SetupError(f"storage {self.uri}: bucket {self.bucket} at {self.where} answered HTTP {status} "
                         f"{code}: check target.base.path and s3.endpoint")

    def _forbidden(self) -> str:
        """Why HeadBucket was refused: HEAD answers carry no error code, a listing's answer does."""
        error = self.call("bucket answers", self.client.list_objects_v2, Bucket=self.bucket, MaxKeys=1,
                          Prefix=self.probe_dir)
        code = _code(error) if error is not None else "AccessDenied"
        if code == "InvalidAccessKeyId":
            return (f"credentials rejected by {self.where}: it knows no {self.who}: fix aws.access.key.id (and "
                    f"aws.secret.access.key with it)")
        if code == "SignatureDoesNotMatch":
            return (f"credentials rejected by {self.where}: aws.secret.access.key is not the secret of {self.who}: "
                    f"fix aws.secret.access.key")
        if code == "RequestTimeTooSkewed":
            return f"{self.where} refuses requests from this machine's clock: synchronise the clock (NTP)"
        if code in ("InvalidToken", "ExpiredToken", "TokenRefreshRequired"):
            return f"credentials rejected by {self.where}: the session token of {self.who} is invalid or expired"
        return (f"credentials rejected by {self.where}: {self.who} may not read bucket {self.bucket} ({code}): fix "
                f"aws.access.key.id / aws.secret.access.key, or grant them s3:ListBucket on it")

    def credentials_can_write(self) -> None:
        key = self._probe_key()
        error = self.call("credentials can write", self.client.put_object, Bucket=self.bucket, Key=key,
                          Body=PROBE_BODY)
        if error is None:
            self.written.add(key)
            error = self.call("credentials can write", self.client.delete_object, Bucket=self.bucket, Key=key)
            if error is None:
                self.written.discard(key)
                return
            verb = "delete"
        else:
            verb = "write"
        raise SetupError(f"storage {self.uri}: {self.who} cannot {verb} under s3://{self.bucket}/{self.probe_dir}/ "
                         f"(HTTP {_status(error)} {_code(error)}): grant s3:PutObject, s3:GetObject and "
                         f"s3:DeleteObject on s3://{self.bucket}/{self.store.root.key}/*")

    def conditional_writes_honoured(self) -> None:
        key = self._probe_key()
        first = self.call("conditional writes honoured", self.client.put_object, Bucket=self.bucket, Key=key,
                          Body=PROBE_BODY, IfNoneMatch="*")
        if first is not None:
            raise SetupError(f"storage {self.uri}: {self.where} refused a conditional write (If-None-Match: *) of a "
                             f"new key (HTTP {_status(first)} {_code(first)}): lakesink commits only through "
                             f"conditional writes; use a store that supports them (AWS S3, MinIO, SeaweedFS, ...)")
        self.written.add(key)
        second = self.call("conditional writes honoured", self.client.put_object, Bucket=self.bucket, Key=key,
                           Body=PROBE_BODY, IfNoneMatch="*")
        if second is not None and name_taken(second):
            return
        if second is None:
            raise SetupError(
                f"storage {self.uri}: {self.where} ignores If-None-Match: * (conditional writes): it overwrote an "
                f"existing object, so two coordinators could overwrite each other's commits and lakesink does not "
                f"write there; use a store that supports conditional writes (AWS S3, MinIO 2024-11 or newer, "
                f"SeaweedFS, Ceph RGW 19 or newer, ...)")
        raise SetupError(f"storage {self.uri}: {self.where} answered a second conditional write of one key with "
                         f"HTTP {_status(second)} {_code(second)} instead of 412: lakesink needs a store that "
                         f"refuses it (AWS S3, MinIO 2024-11 or newer, SeaweedFS, ...)")

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _probe_key(self) -> str:
        return f"{self.probe_dir}/{uuid.uuid4().hex}"

    def call(self, check: str, operation, **kwargs):
        """Run one request: None when it succeeded, its ClientError when the store refused it; SetupError (one
        line) when the store cannot be reached or the budget is spent."""
        from botocore.exceptions import (BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError,
                                         NoCredentialsError, ReadTimeoutError, SSLError)

        if time.monotonic() > self.deadline:
            raise SetupError(f"storage {self.uri}: {self.where} answers too slowly: the checks took over "
                             f"{BUDGET_S:g} s before '{check}': check s3.endpoint and the network")
        try:
            operation(**kwargs)
            return None
        except ClientError as error:
            return error
        except NoCredentialsError:
            raise SetupError(f"storage {self.uri}: no S3 credentials: set aws.access.key.id and "
                             f"aws.secret.access.key, or provide the standard AWS chain (environment, profile, "
                             f"instance role)") from None
        except ConnectTimeoutError:
            raise SetupError(f"storage {self.uri}: cannot reach {self.where} (no connection within "
                             f"{CONNECT_TIMEOUT_S:g} s): check s3.endpoint and that the store is up") from None
        except ReadTimeoutError:
            raise SetupError(f"storage {self.uri}: {self.where} did not answer within {READ_TIMEOUT_S:g} s "
                             f"('{check}'): check s3.endpoint and that the store is healthy") from None
        except SSLError as error:
            raise SetupError(f"storage {self.uri}: TLS with {self.where} failed ({_first_line(error)}): check the "
                             f"scheme of s3.endpoint (http:// or https://)") from None
        except EndpointConnectionError as error:
            raise SetupError(f"storage {self.uri}: cannot reach {self.where} ({_reason(error)}): check s3.endpoint "
                             f"and that the store is up") from None
        except BotoCoreError as error:
            raise SetupError(f"storage {self.uri}: '{check}' failed talking to {self.where} "
                             f"({_first_line(error)}): check s3.endpoint and the network") from None

    def clean_up(self) -> None:
        """Delete what the checks wrote, best effort: one probe object left behind is harmless."""
        for key in list(self.written):
            try:
                self.client.delete_object(Bucket=self.bucket, Key=key)
                self.written.discard(key)
            except Exception:  # noqa: BLE001 - the check's own outcome is what the caller needs
                pass


def _status(error) -> int | None:
    return error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _code(error) -> str:
    return str(error.response.get("Error", {}).get("Code") or "")


def _from_s3(error) -> bool:
    """Whether an error answer came from an S3 implementation (they all send x-amz-request-id or similar)."""
    headers = error.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return any(name.lower().startswith("x-amz-") for name in headers)


def _first_line(error: Exception) -> str:
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


def _reason(error: Exception) -> str:
    """The socket-level cause of a failed connection, in words."""
    text = repr(getattr(error, "kwargs", {}).get("error", "")) + str(error)
    for needle, words in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                          ("nodename nor servname", "unknown host"), ("Temporary failure in name resolution",
                                                                       "host name not resolved"),
                          ("No route to host", "no route to host"), ("Network is unreachable", "network unreachable")):
        if needle in text:
            return words
    return _first_line(error)
