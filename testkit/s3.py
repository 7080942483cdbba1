"""S3 as the tests use it directly: a conditional create, the request every commit on S3 rests on."""
from __future__ import annotations

from botocore.exceptions import ClientError


def put_if_absent(client, bucket: str, key: str, body: bytes) -> int:
    """HTTP status of a conditional create: 200 when the key was new, 412 when it existed."""
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
        return 200
    except ClientError as error:
        return int(error.response["ResponseMetadata"]["HTTPStatusCode"])
