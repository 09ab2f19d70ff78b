"""The one small ObjectStore protocol every backend implements.

Multipart writes are stateless between processes: the control plane creates an upload and gets
an opaque ``upload_id`` string, sink gateways (other processes, other machines) write parts by
``(key, upload_id, part_number)``, and the control plane completes or aborts it. Until
``complete_multipart`` nothing is visible under ``key``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ObjectInfo:
    """An object as listed or headed: key relative to the store's root prefix.

    ``version`` identifies the exact content the listing saw, so a read can be pinned to it
    (``read(..., version=...)``): S3 and Azure ETag, GCS generation, for a local file its size,
    mtime_ns, ctime_ns, device and inode (a rewrite that restores the mtime still changes the
    ctime), a write counter in the in-memory fake. Opaque: compare it, never parse it.
    """

    key: str
    size: int
    etag: str | None = None
    # Native checksums the backend reports, e.g. {"crc32c": "<base64>", "md5": "<hex>"}.
    checksums: dict[str, str] = field(default_factory=dict)
    modified: datetime | None = None
    version: str | None = None
    # When the bytes were last written, where the store tells it apart from ``modified``: a
    # local file's mtime, while ``modified`` is the later of its mtime and ctime. A sync
    # compares a destination by it (see ``ListRow``).
    written: datetime | None = None
    # The store's own id of this version where it keeps one: S3's VersionId (a versioned
    # bucket), Azure's version id (versioning on), GCS's generation. A write's answer carries
    # it, so the transfer report names what landed without asking again (``landed_version``).
    version_id: str | None = None


def landed_version(info: ObjectInfo) -> str | None:
    """The destination version a write's answer names: the store's version id, else its ETag
    (a store that keeps no versions)."""
    return info.version_id or info.etag


@dataclass(frozen=True)
class Copied:
    """A server-side copy's answer: the CRC32C (base64) the store reports of what it wrote
    (None: it reports none) and the version the write made (``landed_version``'s: S3
    VersionId else ETag, GCS generation, Azure version id else ETag; None for a part), so the
    transfer report names what landed as for bytes written."""

    crc32c: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class SkippedEntry:
    """An entry a listing left out, with why. ``key`` ends with ``/`` for a folder.

    ``error`` tells a problem (an unreadable folder or file: the copy is incomplete and must
    say so) from a policy skip (a symbolic link under ``links=skip``, a link loop, a FIFO):
    those are warnings only.
    """

    key: str
    reason: str
    error: bool = False


@dataclass(frozen=True)
class Capabilities:
    """Optional capabilities a backend declares; callers check before relying on them."""

    ranged_read: bool = True
    multipart: bool = True
    native_checksums: frozenset[str] = frozenset()
    server_side_copy: bool = False
    # Backend limits that chunking must respect.
    min_part_size: int = 0
    max_parts: int = 10_000
    # Every call is a few local system calls (microseconds, no network round trip): a batch's
    # objects are then read or written one after the other by the calling thread, since
    # handing each to a worker thread costs more than the call itself.
    local_calls: bool = False
    # A write, batch write or part upload that returns has stored exactly the bytes it was
    # given, every one, and made them durable first when the store is set to (the local store).
    # Bytes the sink CRC-checked before such a write are vouched for: verification needs only
    # their size from the listing (a read-back right after the write reads the page cache).
    checked_writes: bool = False
    # Keys are the paths of files in a folder tree (the local store): a key one such store
    # listed is a name every such store can hold, so a copy between two checks no names.
    file_names: bool = False


@runtime_checkable
class ObjectStore(Protocol):
    """A bucket/container (plus optional root prefix) addressed by a URI."""

    uri: str
    capabilities: Capabilities

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]: ...

    def head(self, key: str) -> ObjectInfo: ...

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        """Bytes ``[start, start+length)``; with ``version`` (an ``ObjectInfo.version``), only
        of that version, else :class:`~gateway_agent.stores.errors.SourceChangedError`."""
        ...

    def write(self, key: str, data: bytes) -> ObjectInfo: ...

    def create_multipart(self, key: str) -> str: ...

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None: ...

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo: ...

    def abort_multipart(self, key: str, upload_id: str) -> None: ...

    def delete(self, key: str) -> None: ...


@runtime_checkable
class ReportsSkips(Protocol):
    """Optional: a store whose listing can leave entries out (local folders: links, unreadable
    folders) records them here, in listing order, so the caller can report them."""

    skipped: list[SkippedEntry]


# ``list_rows``' form of an ObjectInfo: (key, size, modified as integer microseconds since the
# epoch or None, checksums as sorted-key JSON or None, version, etag). With versions (a source)
# the time is the object's last change the store can tell; without (a sync's destination),
# when its bytes were written. They differ for local files only (``local.files.changed_at``).
ListRow = tuple[str, int, int | None, str | None, str | None, str | None]


@runtime_checkable
class ListsRows(Protocol):
    """Optional: ``list`` as batches of plain tuples (``ListRow``), for a caller that stores a
    million entries in a table: the same entries, order and ``skipped`` as ``list``, without
    an object per entry. Without ``versions`` a store may leave version and etag None (a
    listing compared by size and time only, as a sync's destination)."""

    def list_rows(self, prefix: str = "", *, versions: bool = True) -> Iterator[list[ListRow]]: ...


@runtime_checkable
class ListsInShares(Protocol):
    """Optional: ``list_rows`` split into ``shares`` disjoint parts that together are the
    whole listing (entries and ``skipped``), for a store whose listing is CPU work in this
    process (a local folder's walk): the caller lists the shares in as many processes."""

    def list_share(
        self, share: int, shares: int, prefix: str = "", *, versions: bool = True
    ) -> Iterator[list[ListRow]]: ...


@runtime_checkable
class ListsLevels(Protocol):
    """Optional: one level of the listing under ``prefix`` (a delimiter listing): the objects
    right there, as rows, and the sub-prefixes (keys relative to the store, ending with
    ``/``). The level's rows and ``list_rows`` of each sub-prefix are the whole listing, so a
    caller whose store answers over a network lists the sub-prefixes at once."""

    def list_level(self, prefix: str = "") -> tuple[list[ListRow], list[str]]: ...


@runtime_checkable
class SupportsNameCheck(Protocol):
    """Optional (every real backend has it): refuse a key this store cannot hold before any
    byte is sent, with :class:`~gateway_agent.stores.errors.KeyNotSupportedError`."""

    def check_name(self, key: str) -> None: ...


@runtime_checkable
class SupportsCopy(Protocol):
    """Optional: server-side copy within the store (declared by ``server_side_copy``)."""

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo: ...


@runtime_checkable
class SupportsCopyFrom(Protocol):
    """Optional: the destination copies from another store itself (server-side copy): the
    bytes never pass through the caller. ``can_copy_from(src, part)`` says whether it can
    from that store (same service, or a source that signs URLs), a byte range into a staged
    upload too (``part``); ``copy_from`` copies a whole object
    (visible when it returns, as ``write``); ``copy_part_from`` copies a byte range into a
    staged upload of ``create_multipart`` (visible only at ``complete_multipart``). Both read
    exactly the listed ``version`` (else ``SourceChangedError``), write ``meta`` (portable
    ``objmeta``) and the store's write options, and return the CRC32C (base64) of what was
    copied where the store reports it (None: the caller must find it another way). A store
    whose reported CRC32C is the one it computed over the bytes it stored says so with a
    class attribute ``COPY_VOUCHES = True`` (the copy is then vouched for, as a write S3
    echoes the checksum of)."""

    def can_copy_from(self, src: ObjectStore, part: bool = False) -> bool: ...

    def copy_from(
        self,
        src: ObjectStore,
        key: str,
        size: int,
        version: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Copied: ...

    def copy_part_from(
        self,
        src: ObjectStore,
        key: str,
        upload_id: str,
        part_number: int,
        offset: int,
        length: int,
        version: str | None = None,
    ) -> Copied: ...


@runtime_checkable
class CopiesMetadata(Protocol):
    """Optional, with ``SupportsCopyFrom``: the destination copies a whole object with the
    source's metadata in fewer calls than the caller's read of it would take (S3 -> S3: the
    source's HEAD, then CopyObject with its tags copied by S3 itself, no GetObjectTagging).
    The metadata written is the one ``copy_from`` would write after the caller's read (the
    source's, the kept modification time, ``overrides`` as ``--metadata-set``)."""

    def copy_keeping_metadata(
        self,
        src: ObjectStore,
        key: str,
        size: int,
        version: str | None,
        overrides: Mapping[str, str],
    ) -> Copied: ...


@runtime_checkable
class SignsURLs(Protocol):
    """Optional: a short-lived URL that reads one object (a presigned S3 GET, a signed GCS
    URL): a destination copies from it (Azure's Put Blob / Put Block From URL). The URL is a
    credential for its lifetime: never logged."""

    def signed_url(self, key: str, seconds: int = 900) -> str: ...


@runtime_checkable
class WritesIfAbsent(Protocol):
    """Optional: write ``key`` only if no object has that name, atomically on the service
    (S3 and Azure ``If-None-Match: *``, GCS ``ifGenerationMatch=0``, a hard link on a file
    system, which fails on an existing name): of many callers racing for one
    name exactly one gets True. A warm fleet's claim is such a write (``provision.warm``)."""

    def write_if_absent(self, key: str, data: bytes) -> bool: ...


@runtime_checkable
class SupportsWriteBatch(Protocol):
    """Optional: write several small objects in one call (a local folder: fewer system calls
    per object). Each lands whole or not at all, as with ``write``; the result holds None or
    the error per item, in order (one bad item does not keep the others from landing)."""

    def write_batch(self, items: Sequence[tuple[str, bytes | memoryview]]) -> list[Any]: ...


@runtime_checkable
class SupportsReadInto(Protocol):
    """Optional: ``read`` into a caller's buffer (the local store), so a gateway reads big
    files into its pooled buffers instead of a fresh allocation per chunk."""

    def read_into(
        self, key: str, start: int, buf: bytearray | memoryview, version: str | None = None
    ) -> int: ...


@runtime_checkable
class SupportsMetadata(Protocol):
    """Optional: the object's metadata travels with it (``objmeta``: system properties, user
    metadata, tags, modification time). ``head_meta`` reads it in the portable form
    (``version``: the listed one, a hint a store may use to skip a call); ``write`` and
    ``create_multipart`` then take ``meta=`` and store it with the object (a multipart object
    gets it when completed)."""

    def head_meta(self, key: str, version: str | None = None) -> dict[str, Any]: ...


@runtime_checkable
class ReadsWithMetadata(Protocol):
    """Optional: a whole object's bytes and its metadata (``head_meta``'s form) from the same
    answer (S3's GetObject and Azure's Get Blob carry the object's properties as headers), so
    the source gateway sends no HEAD per object, and the metadata is that of the version
    whose bytes were read."""

    def read_meta(
        self, key: str, start: int, length: int, version: str | None = None
    ) -> tuple[bytes, dict[str, Any]]: ...


# A metadata listing pays for itself from this many keys on: GCS bills objects.list as a
# class A operation, 12.5 times an objects.get (class B); fewer keys are asked one by one.
LIST_METADATA_MIN = 16


@runtime_checkable
class ListsMetadata(Protocol):
    """Optional: the metadata of several objects from one listing (GCS's objects.list carries
    every object's resource), for a chunk of small objects read whole: ``{key: meta}`` for
    ``(key, version)`` pairs (worth it from ``LIST_METADATA_MIN`` keys on). An object whose
    listed version is not the one asked for fails
    with ``SourceChangedError`` (its bytes and metadata would disagree)."""

    def metas_of(self, items: Sequence[tuple[str, str | None]]) -> dict[str, dict[str, Any]]: ...
