"""Removing a folder that a hostile submission has written into, without ever raising.

``shutil.rmtree`` recurses once per level of the tree (a tree 1,200 levels deep raises RecursionError, which
its ``ignore_errors`` does not swallow), builds paths that can outgrow PATH_MAX, and stops at a folder whose
mode is 000. :func:`remove_tree` does none of that: it keeps at most two folders open, never recurses, and
never builds a path longer than one name. It empties the top folder by deleting each file and, for each
sub-folder, moving that folder's own sub-folders up into the top folder (so a tree of any depth becomes a
wide, flat one) before deleting it; every folder is moved at most once. Folders it may not read or write
are made readable and writable first (the grader owns them, or is root). Symbolic links are deleted, never
followed. What cannot be removed is reported, not raised.
"""
from __future__ import annotations

import errno
import os
import stat

__all__ = ["remove_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def remove_tree(path) -> str:
    """Delete `path` (a folder and all it holds, or a single file). Returns "" when it is gone, else a line
    saying what is left and why. Never raises (not even RecursionError or MemoryError)."""
    try:
        return _remove(os.fspath(path))
    except BaseException as exc:  # noqa: BLE001 - a clean-up must never sink the run it cleans up after
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{path}: could not be removed ({type(exc).__name__})"


def _remove(path: str) -> str:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ""
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return ""
    problem = ""
    fd = _open_dir(path, None)
    if fd is None:
        return f"{path}: could not be opened to be emptied"
    try:
        problem = _empty(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError as exc:
        return problem or f"{path}: could not be removed ({exc.strerror})"
    return ""


def _open_dir(name: str, dir_fd: int | None) -> int | None:
    """An fd of the folder `name` (relative to dir_fd), made readable, writable and searchable if need be."""
    for attempt in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except PermissionError:
            if attempt:
                return None
            try:
                os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
            except (NotImplementedError, OSError):
                try:  # Linux has no lchmod: the name was checked to be a folder, not a link
                    os.chmod(name, 0o700, dir_fd=dir_fd)
                except OSError:
                    return None
            continue
        except OSError:
            return None
        try:
            if os.fstat(fd).st_mode & 0o700 != 0o700:
                os.fchmod(fd, 0o700)  # to delete what it holds we need write and search permission
        except OSError:
            pass
        return fd
    return None


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _empty(top: int) -> str:
    """Delete everything inside the folder open as `top`."""
    counter = 0
    failures: dict[str, str] = {}
    while True:
        progress, seen = False, 0
        with os.scandir(top) as entries:
            names = [(e.name, _is_dir(e)) for e in entries]
        for name, is_dir in names:
            if name in failures:
                continue
            seen += 1
            if not is_dir:
                try:
                    os.unlink(name, dir_fd=top)
                    progress = True
                except FileNotFoundError:
                    progress = True
                except OSError as exc:
                    failures[name] = exc.strerror or type(exc).__name__
                continue
            try:
                os.rmdir(name, dir_fd=top)
                progress = True
                continue
            except FileNotFoundError:
                progress = True
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
                    failures[name] = exc.strerror or type(exc).__name__
                    continue
            sub = _open_dir(name, top)
            if sub is None:
                failures[name] = "not readable"
                continue
            try:
                counter = _lift(sub, top, counter)
            finally:
                os.close(sub)
            try:
                os.rmdir(name, dir_fd=top)
            except OSError:
                pass      # still holds something: the next pass sees it again
            progress = True
        if seen == 0:
            return ""
        if not progress:
            left = ", ".join(sorted(failures)[:3])
            return f"{len(failures)} entries could not be removed (e.g. {left!r}: {next(iter(failures.values()))})"


def _lift(sub: int, top: int, counter: int) -> int:
    """Delete the files of the folder open as `sub` and move its folders into `top` under fresh names."""
    with os.scandir(sub) as entries:
        children = [(e.name, _is_dir(e)) for e in entries]
    for name, is_dir in children:
        if not is_dir:
            try:
                os.unlink(name, dir_fd=sub)
            except OSError:
                pass
            continue
        for _ in range(1000):
            counter += 1
            try:
                os.rename(name, f".rm{counter}", src_dir_fd=sub, dst_dir_fd=top)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    break
    return counter
