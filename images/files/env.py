"""files: a small text-file system for one user: ls, cd, read, write, mkdir, move, copy, remove, find, grep, du.

Rules (the tools enforce them and their docstrings repeat them to the agent):

- Paths are POSIX paths, absolute or relative to the working directory; "~" is the user's home.
  "." and ".." work as usual. A path is at most 1,024 characters and a name at most 255.
- Files hold UTF-8 text of at most 10,000 characters. All files together may use at most the quota
  (256 KiB by default); `du` shows what uses the space.
- Read-only files and folders (e.g. /shared) can be read and copied from, never changed, moved or removed;
  nothing can be created inside a read-only folder.
- Like mv and cp: moving or copying onto an existing folder puts the item inside it; an existing file is
  only replaced with overwrite=true. Folders are copied or removed only with recursive=true, and a
  folder cannot be moved or copied into itself.
- grep looks for a plain text (not a regular expression), line by line.
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError

MAX_FILE_CHARS = 10_000
MAX_PATH = 1024
MAX_NAME = 255
MAX_NODES = 2000
MAX_DEPTH = 32
DEFAULT_QUOTA = 262_144

PathArg = Annotated[str, Field(min_length=1, max_length=MAX_PATH)]
Content = Annotated[str, Field(max_length=MAX_FILE_CHARS)]
Kind = Literal["file", "dir"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Node(Model):
    kind: Kind
    content: Content = Field(default="", description="Files only: their text.")
    modified_at: NaiveDatetime
    read_only: bool = False


class FilesState(EnvState):
    home: Annotated[str, Field(max_length=MAX_PATH)] = "/home/user"
    cwd: Annotated[str, Field(max_length=MAX_PATH)] = "/home/user"
    quota_bytes: int = Field(default=DEFAULT_QUOTA, ge=0, le=8_000_000)
    nodes: dict[Annotated[str, Field(max_length=MAX_PATH)], Node] = Field(
        default_factory=dict,
        max_length=MAX_NODES,
        description="Every file and folder, keyed by absolute path.",
    )

    @model_validator(mode="after")
    def _integrity(self) -> FilesState:
        root = self.nodes.get("/")
        if root is None or root.kind != "dir":
            raise ValueError("the root folder '/' is missing")
        used = 0
        for path, node in self.nodes.items():
            if not path.startswith("/") or posixpath.normpath(path) != path or "//" in path:
                raise ValueError(f"node key {path!r} is not a normalized absolute path")
            if path != "/":
                parent = self.nodes.get(posixpath.dirname(path))
                if parent is None or parent.kind != "dir":
                    raise ValueError(f"{path}: its parent folder {posixpath.dirname(path)} does not exist")
                if len(posixpath.basename(path)) > MAX_NAME or "\x00" in path:
                    raise ValueError(f"{path}: a name is at most {MAX_NAME} characters, without NUL")
                if path.count("/") > MAX_DEPTH:
                    raise ValueError(f"{path}: folders nest at most {MAX_DEPTH} deep")
            if node.kind == "dir" and node.content:
                raise ValueError(f"{path} is a folder but has content")
            if node.modified_at > self.now:
                raise ValueError(f"{path} was modified after now ({self.now.isoformat()})")
            used += len(node.content.encode())
        if used > self.quota_bytes:
            raise ValueError(f"files use {used} bytes, more than the quota of {self.quota_bytes}")
        for name, path in (("home", self.home), ("cwd", self.cwd)):
            node = self.nodes.get(path)
            if node is None or node.kind != "dir":
                raise ValueError(f"{name} {path!r} is not an existing folder")
        return self


class Entry(Model):
    name: str
    path: str
    kind: Kind
    size: int = Field(description="Bytes; for a folder, the number of entries in it.")
    modified_at: NaiveDatetime
    read_only: bool


class Listing(Model):
    path: str
    entries: list[Entry]


class FileText(Model):
    path: str
    content: str
    start_line: int
    end_line: int
    total_lines: int
    size: int


class Match(Model):
    path: str
    line_number: int
    line: str


class Usage(Model):
    path: str
    bytes: int
    files: int = Field(description="Files at or under the path.")
    folders: int = Field(description="Folders under the path (not counting the path itself).")


class DiskUsage(Model):
    path: str
    bytes: int
    files: int
    folders: int
    children: list[Usage] = Field(description="Each entry directly inside the folder, largest first.")
    quota_bytes: int
    used_bytes: int = Field(description="Used by all files, everywhere.")
    free_bytes: int


env = Environment(
    "files",
    FilesState,
    version="1.0.0",
    domain="office",
    description=(
        "A user's text-file system with a working directory: list, change folder, read (by line ranges), "
        "write or append, make folders, move, copy, remove, find by name, grep for text and disk usage "
        "under a quota, with read-only shared folders."
    ),
)


# ---------------------------------------------------------------- helpers


def _resolve(state: FilesState, raw: str) -> str:
    if "\x00" in raw:
        raise ToolError("A path cannot contain a NUL character.")
    text = raw.strip()
    if not text:
        raise ToolError("The path is blank.")
    if text == "~" or text.startswith("~/"):
        text = state.home + text[1:]
    path = posixpath.normpath(text if text.startswith("/") else posixpath.join(state.cwd, text))
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if len(path) > MAX_PATH:
        raise ToolError(f"The path is longer than {MAX_PATH} characters.")
    if any(len(part) > MAX_NAME for part in path.split("/")):
        raise ToolError(f"A file or folder name is at most {MAX_NAME} characters.")
    return path


def _node(state: FilesState, path: str) -> Node:
    node = state.nodes.get(path)
    if node is None:
        parent = posixpath.dirname(path)
        hint = f" ls {parent} shows what is there." if parent in state.nodes else ""
        raise ToolError(f"No such file or folder: {path}.{hint}")
    return node


def _dir(state: FilesState, path: str) -> Node:
    node = _node(state, path)
    if node.kind != "dir":
        raise ToolError(f"{path} is a file, not a folder.")
    return node


def _writable_parent(state: FilesState, path: str) -> Node:
    parent_path = posixpath.dirname(path)
    parent = state.nodes.get(parent_path)
    if parent is None:
        raise ToolError(f"The folder {parent_path} does not exist; create it first with make_directory.")
    if parent.kind != "dir":
        raise ToolError(f"{parent_path} is a file, not a folder.")
    if parent.read_only:
        raise ToolError(f"Permission denied: {parent_path} is read-only.")
    return parent


def _children(state: FilesState, path: str) -> list[str]:
    prefix = "/" if path == "/" else path + "/"
    return [p for p in state.nodes if p.startswith(prefix) and p != path and "/" not in p[len(prefix) :]]


def _subtree(state: FilesState, path: str) -> list[str]:
    prefix = "/" if path == "/" else path + "/"
    return sorted(p for p in state.nodes if p == path or p.startswith(prefix))


def _size(state: FilesState, path: str, node: Node) -> int:
    return len(_children(state, path)) if node.kind == "dir" else len(node.content.encode())


def _entry(state: FilesState, path: str) -> Entry:
    node = state.nodes[path]
    return Entry(
        name=posixpath.basename(path) or "/",
        path=path,
        kind=node.kind,
        size=_size(state, path, node),
        modified_at=node.modified_at,
        read_only=node.read_only,
    )


def _used(state: FilesState) -> int:
    return sum(len(n.content.encode()) for n in state.nodes.values())


def _check_space(state: FilesState, extra: int) -> None:
    used = _used(state)
    if used + extra > state.quota_bytes:
        raise ToolError(
            f"No space left: this needs {extra} more bytes but {state.quota_bytes - used} of the "
            f"{state.quota_bytes}-byte quota are free. du shows what uses the space; remove something first."
        )


def _check_count(state: FilesState, extra: int) -> None:
    if len(state.nodes) + extra > MAX_NODES:
        raise ToolError(f"At most {MAX_NODES} files and folders.")


def _touch(state: FilesState, folder: str) -> None:
    state.nodes[folder].modified_at = state.now


def _target(state: FilesState, source: str, destination: str, overwrite: bool) -> str:
    """Where `source` lands for mv/cp onto `destination` (inside it when it is a folder)."""
    dest = destination
    existing = state.nodes.get(dest)
    if existing is not None and existing.kind == "dir":
        dest = posixpath.join(dest, posixpath.basename(source))
        existing = state.nodes.get(dest)
    if dest == source:
        raise ToolError(f"{source} and {dest} are the same.")
    if dest.startswith(source + "/"):
        raise ToolError(f"Cannot put the folder {source} inside itself ({dest}).")
    if existing is not None:
        if existing.kind == "dir":
            raise ToolError(f"{dest} is an existing folder; it is never replaced.")
        if state.nodes[source].kind == "dir":
            raise ToolError(f"{dest} is an existing file; a folder cannot replace it.")
        if not overwrite:
            raise ToolError(f"{dest} already exists; pass overwrite=true to replace it.")
        if existing.read_only:
            raise ToolError(f"Permission denied: {dest} is read-only.")
    if len(dest) > MAX_PATH:
        raise ToolError(f"The path {dest[:60]}... would be longer than {MAX_PATH} characters.")
    _writable_parent(state, dest)
    return dest


def _protect_cwd(state: FilesState, path: str, action: str) -> None:
    if path in ("/", state.home) or state.home.startswith(path + "/"):
        raise ToolError(f"{path} holds the home folder and cannot be {action}.")
    if state.cwd == path or state.cwd.startswith(path + "/"):
        raise ToolError(f"The working folder {state.cwd} is inside {path}; cd elsewhere first.")


# ---------------------------------------------------------------- tools


@env.tool(read_only=True)
def ls(state: FilesState, path: PathArg = ".", show_hidden: bool = False) -> Listing:
    """List a folder's entries by name (or describe one file): kind, size, time and whether read-only.

    Args:
        path: The folder (or file), absolute or relative to the working folder; default ".".
        show_hidden: Also list names starting with "." (like ls -a).
    """
    target = _resolve(state, path)
    node = _node(state, target)
    if node.kind == "file":
        return Listing(path=target, entries=[_entry(state, target)])
    names = sorted(_children(state, target))
    entries = [_entry(state, p) for p in names if show_hidden or not posixpath.basename(p).startswith(".")]
    return Listing(path=target, entries=entries)


@env.tool(idempotent=True)
def cd(state: FilesState, path: PathArg = "~") -> Listing:
    """Change the working folder and list it; relative paths in every tool start from there.

    Args:
        path: The folder to go to; "~" (default) is home, ".." the parent.
    """
    target = _resolve(state, path)
    _dir(state, target)
    state.cwd = target
    return ls(state, target)


@env.tool(read_only=True)
def read_file(
    state: FilesState,
    path: PathArg,
    start_line: Annotated[int, Field(ge=1)] = 1,
    max_lines: Annotated[int, Field(ge=1, le=1000)] = 200,
) -> FileText:
    """Read a text file, or a range of its lines.

    Args:
        path: The file, absolute or relative to the working folder.
        start_line: The first line to return, counting from 1.
        max_lines: The most lines to return (1-1000, default 200).
    """
    target = _resolve(state, path)
    node = _node(state, target)
    if node.kind == "dir":
        raise ToolError(f"{target} is a folder; use ls to see what it holds.")
    lines = node.content.splitlines()
    if start_line > max(len(lines), 1):
        raise ToolError(f"{target} has {len(lines)} lines; start_line {start_line} is past the end.")
    chunk = lines[start_line - 1 : start_line - 1 + max_lines]
    return FileText(
        path=target,
        content="\n".join(chunk),
        start_line=start_line,
        end_line=start_line - 1 + len(chunk),
        total_lines=len(lines),
        size=len(node.content.encode()),
    )


@env.tool
def write_file(state: FilesState, path: PathArg, content: Content, append: bool = False) -> Entry:
    """Create a text file, replace its content, or append to it. The folder it goes in must exist.

    Args:
        path: The file, absolute or relative to the working folder.
        content: The text to write (the file may hold at most 10,000 characters).
        append: Add to the end of an existing file instead of replacing it.
    """
    target = _resolve(state, path)
    existing = state.nodes.get(target)
    if existing is not None and existing.kind == "dir":
        raise ToolError(f"{target} is a folder; give a file path.")
    if existing is not None and existing.read_only:
        raise ToolError(f"Permission denied: {target} is read-only.")
    _writable_parent(state, target)
    old = existing.content if existing is not None else ""
    new = old + content if append else content
    if len(new) > MAX_FILE_CHARS:
        raise ToolError(f"A file holds at most {MAX_FILE_CHARS} characters; this would be {len(new)}.")
    _check_space(state, len(new.encode()) - len(old.encode()))
    if existing is None:
        _check_count(state, 1)
        state.nodes[target] = Node(kind="file", content=new, modified_at=state.now)
        _touch(state, posixpath.dirname(target))
    else:
        existing.content, existing.modified_at = new, state.now
    return _entry(state, target)


@env.tool
def make_directory(state: FilesState, path: PathArg, parents: bool = False) -> Entry:
    """Create a folder (like mkdir; with parents=true also its missing parents, and no error if it exists).

    Args:
        path: The new folder, absolute or relative to the working folder.
        parents: Also create missing parent folders; an existing folder is then fine.
    """
    target = _resolve(state, path)
    existing = state.nodes.get(target)
    if existing is not None:
        if existing.kind == "dir" and parents:
            return _entry(state, target)
        raise ToolError(f"{target} already exists.")
    missing = []
    cursor = target
    while cursor not in state.nodes:
        missing.append(cursor)
        cursor = posixpath.dirname(cursor)
    if len(missing) > 1 and not parents:
        raise ToolError(
            f"The folder {posixpath.dirname(target)} does not exist; pass parents=true to create it too."
        )
    if state.nodes[cursor].kind != "dir":
        raise ToolError(f"{cursor} is a file, not a folder.")
    if state.nodes[cursor].read_only:
        raise ToolError(f"Permission denied: {cursor} is read-only.")
    if target.count("/") > MAX_DEPTH:
        raise ToolError(f"Folders nest at most {MAX_DEPTH} deep.")
    _check_count(state, len(missing))
    for folder in reversed(missing):
        state.nodes[folder] = Node(kind="dir", modified_at=state.now)
    _touch(state, cursor)
    return _entry(state, target)


@env.tool
def move(state: FilesState, source: PathArg, destination: PathArg, overwrite: bool = False) -> Entry:
    """Move or rename a file or folder (like mv). Onto an existing folder, it goes inside it.

    Args:
        source: What to move.
        destination: The new path, or an existing folder to move it into.
        overwrite: Replace an existing file at the destination.
    """
    src = _resolve(state, source)
    node = _node(state, src)
    if node.read_only or state.nodes[posixpath.dirname(src)].read_only:
        raise ToolError(f"Permission denied: {src} is read-only.")
    _protect_cwd(state, src, "moved")
    dest = _target(state, src, _resolve(state, destination), overwrite)
    moved = {p: state.nodes.pop(p) for p in _subtree(state, src)}
    for old, item in moved.items():
        state.nodes[dest + old[len(src) :]] = item
    _touch(state, posixpath.dirname(src))
    _touch(state, posixpath.dirname(dest))
    return _entry(state, dest)


@env.tool
def copy(
    state: FilesState, source: PathArg, destination: PathArg, recursive: bool = False, overwrite: bool = False
) -> Entry:
    """Copy a file, or a folder with recursive=true (like cp -r). Onto an existing folder, the copy goes inside it.
    Copies are never read-only.

    Args:
        source: What to copy.
        destination: The new path, or an existing folder to copy it into.
        recursive: Required to copy a folder and everything in it.
        overwrite: Replace an existing file at the destination.
    """
    src = _resolve(state, source)
    node = _node(state, src)
    if node.kind == "dir" and not recursive:
        raise ToolError(f"{src} is a folder; pass recursive=true to copy it with its contents.")
    dest = _target(state, src, _resolve(state, destination), overwrite)
    paths = _subtree(state, src)
    replaced = state.nodes.get(dest)
    added = sum(len(state.nodes[p].content.encode()) for p in paths) - (
        len(replaced.content.encode()) if replaced else 0
    )
    _check_space(state, added)
    _check_count(state, len(paths))
    for old in paths:
        item = state.nodes[old]
        state.nodes[dest + old[len(src) :]] = Node(
            kind=item.kind, content=item.content, modified_at=state.now
        )
    _touch(state, posixpath.dirname(dest))
    return _entry(state, dest)


@env.tool(destructive=True)
def remove(state: FilesState, path: PathArg, recursive: bool = False) -> Usage:
    """Delete a file, or a folder with everything in it when recursive=true (like rm -r). There is no undo.

    Returns what was removed.

    Args:
        path: What to delete.
        recursive: Required to delete a folder that is not empty.
    """
    target = _resolve(state, path)
    node = _node(state, target)
    _protect_cwd(state, target, "removed")
    paths = _subtree(state, target)
    if node.kind == "dir" and len(paths) > 1 and not recursive:
        raise ToolError(
            f"{target} is a folder with {len(paths) - 1} entries inside; pass recursive=true to delete it all."
        )
    for p in paths:
        if state.nodes[p].read_only:
            raise ToolError(f"Permission denied: {p} is read-only.")
    if state.nodes[posixpath.dirname(target)].read_only:
        raise ToolError(f"Permission denied: {posixpath.dirname(target)} is read-only.")
    removed = Usage(
        path=target,
        bytes=sum(len(state.nodes[p].content.encode()) for p in paths),
        files=sum(state.nodes[p].kind == "file" for p in paths),
        folders=sum(state.nodes[p].kind == "dir" for p in paths if p != target),
    )
    for p in paths:
        del state.nodes[p]
    _touch(state, posixpath.dirname(target))
    return removed


@env.tool(read_only=True)
def find(
    state: FilesState,
    path: PathArg = ".",
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME)] = "*",
    kind: Kind | None = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
) -> list[Entry]:
    """Find files and folders under a folder whose name matches a shell pattern (like find -name), sorted by path.

    Args:
        path: The folder to search in (default the working folder).
        name: A pattern for the name: * any text, ? one character, [abc] one of; e.g. "*.csv". Case-sensitive.
        kind: Only "file" or only "dir".
        limit: The most results (1-500, default 100).
    """
    root = _resolve(state, path)
    _dir(state, root)
    out = []
    for p in _subtree(state, root):
        if p == root:
            continue
        node = state.nodes[p]
        if (kind is None or node.kind == kind) and fnmatch.fnmatchcase(posixpath.basename(p), name):
            out.append(_entry(state, p))
            if len(out) == limit:
                break
    return out


@env.tool(read_only=True)
def grep(
    state: FilesState,
    text: Annotated[str, Field(min_length=1, max_length=200)],
    path: PathArg = ".",
    ignore_case: bool = False,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
) -> list[Match]:
    """Find the lines that contain a plain text, in one file or in every file under a folder (like grep -rnF).

    Args:
        text: The text to look for (not a regular expression), e.g. "TODO".
        path: A file, or a folder to search recursively (default the working folder).
        ignore_case: Match regardless of upper and lower case.
        limit: The most matching lines (1-500, default 100).
    """
    root = _resolve(state, path)
    _node(state, root)
    needle = text.casefold() if ignore_case else text
    out: list[Match] = []
    for p in _subtree(state, root):
        node = state.nodes[p]
        if node.kind != "file":
            continue
        for number, line in enumerate(node.content.splitlines(), 1):
            if needle in (line.casefold() if ignore_case else line):
                out.append(Match(path=p, line_number=number, line=line[:500]))
                if len(out) == limit:
                    return out
    return out


@env.tool(read_only=True)
def du(state: FilesState, path: PathArg = ".") -> DiskUsage:
    """Show how many bytes a folder (or file) uses, broken down by what is directly inside it, and the quota.

    Args:
        path: The folder or file (default the working folder).
    """
    root = _resolve(state, path)
    _node(state, root)

    def usage(p: str) -> Usage:
        paths = _subtree(state, p)
        return Usage(
            path=p,
            bytes=sum(len(state.nodes[q].content.encode()) for q in paths),
            files=sum(state.nodes[q].kind == "file" for q in paths),
            folders=sum(state.nodes[q].kind == "dir" for q in paths if q != p),
        )

    total = usage(root)
    children = sorted((usage(c) for c in _children(state, root)), key=lambda u: (-u.bytes, u.path))
    used = _used(state)
    return DiskUsage(
        **total.model_dump(),
        children=children,
        quota_bytes=state.quota_bytes,
        used_bytes=used,
        free_bytes=state.quota_bytes - used,
    )
