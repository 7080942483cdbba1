"""Where a table lives, and the one way lakesink reads and writes there: a local directory or an S3 bucket.

`Location` names the table for each engine (a local path for all of them; `s3a://` for Spark's S3A, `s3://` for
delta-rs and pyarrow). `Store` does every file operation through `pyarrow.fs` (local and S3 alike), and adds the
one operation that file system lacks: put-if-absent, a hard link on a local disk and a PUT with
`If-None-Match: *` on S3, so that of two writers of one name exactly one wins and the other is told so
(docs/ARCHITECTURE.md, "Object storage").
"""
from __future__ import annotations

import errno
import logging
import os
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from connector.errors import SetupError

if TYPE_CHECKING:
    from connector.config import LakesinkConfig

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
S3_SCHEMES = ("s3", "s3a")


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3: the `s3.*` / `aws.*` keys. None means the AWS default (endpoint, region, credential chain)."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key: str | None = None
    secret_key: str | None = None

    @classmethod
    def from_config(cls, cfg: "LakesinkConfig") -> "S3Settings":
        return cls(cfg.s3_endpoint, cfg.s3_region, cfg.s3_path_style_access_enabled, cfg.aws_access_key_id,
                   cfg.aws_secret_access_key)

    def __repr__(self) -> str:  # the secret never shows
        return (f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, path_style={self.path_style}, "
                f"access_key={self.access_key!r})")

    @property
    def effective_region(self) -> str | None:
        return self.region or (DEFAULT_REGION if self.endpoint else None)

    @property
    def plain_http(self) -> bool:
        return bool(self.endpoint and self.endpoint.startswith("http://"))

    def delta_options(self) -> dict[str, str]:
        """storage_options for delta-rs."""
        out: dict[str, str] = {}
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
        if self.effective_region:
            out["AWS_REGION"] = self.effective_region
        if self.plain_http:
            out["AWS_ALLOW_HTTP"] = "true"
        if self.path_style:
            out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if self.access_key:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key or ""
        return out

    def hadoop_conf(self) -> dict[str, str]:
        """S3A settings (Hadoop configuration keys, without Spark's `spark.hadoop.` prefix)."""
        out: dict[str, str] = {"fs.s3a.path.style.access": "true" if self.path_style else "false"}
        if self.endpoint:
            out["fs.s3a.endpoint"] = self.endpoint
            out["fs.s3a.connection.ssl.enabled"] = "false" if self.plain_http else "true"
        if self.effective_region:
            out["fs.s3a.endpoint.region"] = self.effective_region
        if self.access_key:
            out["fs.s3a.access.key"] = self.access_key
            out["fs.s3a.secret.key"] = self.secret_key or ""
            out["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return out

    def arrow_filesystem(self, delayed_open: bool = False) -> pafs.S3FileSystem:
        """`delayed_open`: an output stream starts no upload until it has a part's worth of bytes, so a file smaller
        than that is one PUT, not a multipart upload's three requests (an error shows at the first write or at
        close rather than at open)."""
        kwargs: dict = {"region": self.effective_region or DEFAULT_REGION, "connect_timeout": 10,
                        "request_timeout": 60, "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
                        "allow_delayed_open": delayed_open}
        if self.endpoint:
            parsed = urllib.parse.urlparse(self.endpoint)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
        if self.access_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
        kwargs["force_virtual_addressing"] = not self.path_style and not self.endpoint
        return pafs.S3FileSystem(**kwargs)

    def client(self, *, connect_timeout_s: float = 10, read_timeout_s: float = 60, attempts: int = 4):
        """A boto3 S3 client: what pyarrow.fs cannot do (conditional puts). `attempts` counts the first try."""
        import boto3
        from botocore.config import Config

        style = "path" if self.path_style else "auto"
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.effective_region, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": style}, retries={"total_max_attempts": attempts, "mode": "standard"},
                          connect_timeout=connect_timeout_s, read_timeout=read_timeout_s))


@dataclass(frozen=True)
class Location:
    """A table's location. `bucket` is None for a local directory; `key` is the path under the bucket (or the
    absolute local path)."""

    bucket: str | None
    key: str

    @classmethod
    def parse(cls, uri: str) -> "Location":
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme in S3_SCHEMES:
            if not parsed.netloc:
                raise SetupError(f"{uri!r} names no bucket: write s3://bucket/prefix")
            return cls(parsed.netloc, parsed.path.strip("/"))
        if parsed.scheme == "file":
            return cls(None, str(Path(urllib.parse.unquote(parsed.path)).resolve()))
        if parsed.scheme and len(parsed.scheme) > 1:  # a drive letter is not a scheme
            raise SetupError(f"{uri!r}: lakesink writes tables on a local path, file: or s3:// (s3a://), not "
                             f"{parsed.scheme}:")
        return cls(None, str(Path(uri).resolve()))

    @property
    def is_s3(self) -> bool:
        return self.bucket is not None

    def __str__(self) -> str:
        return self.delta_uri

    @property
    def spark_path(self) -> str:
        """The path Spark (Delta, S3A) is given."""
        return f"s3a://{self.bucket}/{self.key}" if self.is_s3 else self.key

    @property
    def delta_uri(self) -> str:
        """The URI delta-rs is given, and users are shown."""
        return f"s3://{self.bucket}/{self.key}" if self.is_s3 else self.key

    @property
    def arrow_path(self) -> str:
        return f"{self.bucket}/{self.key}" if self.is_s3 else self.key


class Store:
    """Files under one root (a table's location), by paths relative to it ('/'-separated)."""

    def __init__(self, root: Location, s3: S3Settings | None = None):
        self.root = root
        self.s3 = s3 or S3Settings()
        self.fs: pafs.FileSystem = self.s3.arrow_filesystem() if root.is_s3 else pafs.LocalFileSystem()
        # writes only: a read of a missing file keeps failing at open, where the readers expect it
        self._out_fs = self.s3.arrow_filesystem(delayed_open=True) if root.is_s3 else self.fs
        self._client = None

    @classmethod
    def for_config(cls, cfg: "LakesinkConfig") -> "Store":
        return cls(Location.parse(cfg.table_path), S3Settings.from_config(cfg))

    def __repr__(self) -> str:
        return f"Store({self.root.delta_uri})"

    def path(self, relative: str) -> str:
        """The pyarrow.fs path of `relative`."""
        return f"{self.root.arrow_path}/{relative}" if relative else self.root.arrow_path

    def spark_path(self, relative: str) -> str:
        return f"{self.root.spark_path}/{relative}"

    @property
    def client(self):
        if self._client is None:
            self._client = self.s3.client()
        return self._client

    # --- Delta ----------------------------------------------------------------------------------------------

    def delta_table(self, version: int | None = None):
        """The table through delta-rs, or None when there is none."""
        import deltalake

        try:
            return deltalake.DeltaTable(self.root.delta_uri, version=version,
                                        storage_options=self.s3.delta_options() if self.root.is_s3 else None)
        except deltalake.exceptions.TableNotFoundError:
            return None

    # --- reads ----------------------------------------------------------------------------------------------

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes, None when it does not exist. On S3 one GET (pyarrow's input stream sends a HEAD
        first); a failure to read is an OSError either way."""
        if self.root.is_s3:
            return self._get_s3(relative)
        try:
            with self.fs.open_input_stream(self.path(relative)) as stream:
                return stream.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if _not_found(exc):
                return None
            raise

    def _s3_key(self, relative: str) -> str:
        """The object key of `relative` under the root (a table at the bucket's root has an empty key)."""
        return f"{self.root.key}/{relative}" if self.root.key else relative

    def _get_s3(self, relative: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self.client.get_object(Bucket=self.root.bucket, Key=self._s3_key(relative))["Body"].read()
        except ClientError as exc:
            if object_missing(exc):
                return None
            raise OSError(f"reading {self.path(relative)}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"reading {self.path(relative)}: {exc}") from exc

    def exists(self, relative: str) -> bool:
        """Whether the file exists: on S3 one HEAD (pyarrow's file info lists the prefix too when the key is
        missing, to tell a directory); a failure to ask is an OSError."""
        if not self.root.is_s3:
            return Path(self.path(relative)).exists()
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.root.bucket, Key=self._s3_key(relative))
            return True
        except ClientError as exc:
            if object_missing(exc):
                return False
            raise OSError(f"looking for {self.path(relative)}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"looking for {self.path(relative)}: {exc}") from exc

    def missing(self, relatives: list[str]) -> list[str]:
        """Those of `relatives` that do not exist (one request per file on S3)."""
        infos = self.fs.get_file_info([self.path(r) for r in relatives]) if relatives else []
        return [r for r, info in zip(relatives, infos) if info.type == pafs.FileType.NotFound]

    def list(self, relative_dir: str, recursive: bool = False) -> list[pafs.FileInfo]:
        """Files (not directories) under `relative_dir`; empty when it does not exist."""
        selector = pafs.FileSelector(self.path(relative_dir), allow_not_found=True, recursive=recursive)
        return [info for info in self.fs.get_file_info(selector) if info.type == pafs.FileType.File]

    def relative(self, info_path: str) -> str:
        """A listed file's path relative to the root."""
        return info_path[len(self.root.arrow_path):].lstrip("/")

    # --- writes ---------------------------------------------------------------------------------------------

    def open_output(self, relative: str):
        """A stream writing `relative` (on S3 the object appears whole when the stream closes; a local file
        appears at once: write local files under a temporary name and `publish` them)."""
        if not self.root.is_s3:
            Path(self.path(relative)).parent.mkdir(parents=True, exist_ok=True)
        return self._out_fs.open_output_stream(self.path(relative))

    def delete(self, relative: str) -> None:
        try:
            self.fs.delete_file(self.path(relative))
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not _not_found(exc):
                raise

    def delete_unreferenced(self, relatives: list[str], why: str) -> None:
        """Delete files no table version references (their names are known); one that cannot be deleted now is
        logged and left to the sweep of unreferenced files (connector/table/sweep.py)."""
        for relative in relatives:
            try:
                self.delete(relative)
            except OSError as exc:
                log.warning("could not delete %s (%s; the sweep will): %s", relative, why, exc)

    def put_if_absent(self, relative: str, data: bytes) -> bool:
        """Write `data` under `relative` unless something is there: True when this call wrote it, False when the
        name was taken (whoever took it). Durable when it returns True."""
        if self.root.is_s3:
            return self._put_if_absent_s3(relative, data)
        target = Path(self.path(relative))
        temporary = _synced_temporary(target, data)
        try:
            try:
                os.link(temporary, target)  # atomic and exclusive on a POSIX file system
            except FileExistsError:
                return False
            sync_directory(target.parent)
            return True
        finally:
            temporary.unlink(missing_ok=True)

    def _put_if_absent_s3(self, relative: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.root.bucket, Key=self._s3_key(relative), Body=data,
                                   IfNoneMatch="*")
            return True
        except ClientError as exc:
            if name_taken(exc):
                return False
            raise

    def write_file(self, relative: str, data: bytes) -> None:
        """Write (or replace) `relative` durably: local files under a temporary name, synced, then renamed."""
        if self.root.is_s3:
            with self._out_fs.open_output_stream(self.path(relative)) as out:
                out.write(data)
            return
        target = Path(self.path(relative))
        temporary = _synced_temporary(target, data)
        try:
            os.replace(temporary, target)
            sync_directory(target.parent)
        finally:
            temporary.unlink(missing_ok=True)


def _synced_temporary(target: Path, data: bytes) -> Path:
    """`data` written and synced under a hidden temporary name beside `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return temporary


def object_missing(error) -> bool:
    """Whether a botocore ClientError of a GET or HEAD says the object does not exist (a HEAD's answer has no body,
    so its code is the status)."""
    return (error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404
            or error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"))


def name_taken(error) -> bool:
    """Whether a botocore ClientError of a `If-None-Match: *` put says the key was taken: 412, or 409 for a
    concurrent conditional put of the same key."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = error.response.get("Error", {}).get("Code")
    return status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict")



def sync_directory(directory: Path) -> None:
    """Make the new names in a local directory durable (POSIX: a new name is durable once its directory is
    synced)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:  # EINVAL: a file system that cannot sync directories
            raise
    finally:
        os.close(fd)


def _not_found(exc: OSError) -> bool:
    text = str(exc)
    return "NoSuchKey" in text or "Path does not exist" in text or "404" in text
