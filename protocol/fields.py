"""Field types of the command structs: decoded loosely, read typed.

The broker answers an invalid command with the reference server's exact text, in the
reference's order of checks, so msgspec must not reject a field first with its own words:
a field is decoded as whatever arrived, and the command's `__post_init__` checks it with the
rules of `values.py` and stores the normalised value. These aliases let a field be declared
with the type it holds once `__post_init__` has run, which is all any handler ever sees:

- `Checked[T]`: decoded as any value; a T after `__post_init__`.
- `FromRaw[T]`: decoded as `msgspec.Raw` (the bytes, undecoded); a T after `__post_init__`.

mypy reads both as T; msgspec reads them as `Any` and `msgspec.Raw`. Inside `__post_init__`
the value may still be the wire's, so the checks there pass it to helpers that take `Any`.
`ABSENT` is the default of a field that is None until checked, whatever type it has after.

A batch's array is read raw first (its length decides whether the engine checks it in
slices), so it is two fields: the wire's, named `raw_<name>` in Python and `<name>` on the
wire, and the checked one, `checked_only(name)`, which keeps the name handlers read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec

T = TypeVar("T")

ABSENT: Any = None
"""Default of a `Checked` field: None on the wire means absent; `__post_init__` replaces it."""

if TYPE_CHECKING:
    Checked = Annotated[T, "checked by __post_init__"]
    FromRaw = Annotated[T, "raw, checked by __post_init__"]
else:

    class Checked:
        """At run time `Checked[T]` is `Any`, which msgspec decodes without a check."""

        def __class_getitem__(cls, item: object) -> object:
            return Any

    class FromRaw:
        """At run time `FromRaw[T]` is `msgspec.Raw`, which msgspec keeps undecoded."""

        def __class_getitem__(cls, item: object) -> object:
            return msgspec.Raw


def checked_only(name: str, default: object = None) -> Any:
    """A field `name` only `__post_init__` sets: on the wire it is `@checked/<name>`, a key no
    client sends (whatever one sent there is overwritten, or not read)."""
    return msgspec.field(default=default, name="@checked/" + name)


__all__ = ["ABSENT", "Checked", "FromRaw", "checked_only"]
