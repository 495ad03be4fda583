"""A cached projection state decoded one field at a time.

The state cache (:mod:`perfledger.ledger.cache`) holds a projection's state one field per section
(:func:`encode_fields`). On a large ledger, decoding all of it dominated a workflow decision
through the CLI (a 10,000-event session: 6.8 MB, ~0.13 s), while a decider reads a few of its
maps (``evidence.add`` reads ``evidence`` and ``targets``, never ``verdicts``).
:class:`LazyStruct` holds the sections' bytes, decodes a field on first access, and encodes again
only the fields that were accessed: an untouched field goes back to the cache byte for byte (the
same bytes, so the same content-addressed file, not written again).

It is a cache-reading device only: :meth:`perfledger.api.Ledger.state_at` hands it to the
deciders of :func:`perfledger.commands.registry.operations.execute` (``lazy=True``) and materializes it into
the Struct for every other caller; verify and audit never read the cache.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec


@cache
def _fields(struct_type: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    """Field name (the attribute) -> its FieldInfo (``encode_name`` keys the encoded map)."""
    return {f.name: f for f in msgspec.structs.fields(struct_type)}


@cache
def _decoder(struct_type: type[msgspec.Struct], name: str) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(_fields(struct_type)[name].type)


def encode_fields(state: Any) -> dict[str, bytes]:
    """The sections of ``state`` (a msgspec Struct or a :class:`LazyStruct`): field encode name
    -> the msgpack encoding of that field's value. A LazyStruct's untouched fields are returned
    as the bytes it was built from."""
    if isinstance(state, LazyStruct):
        return state.encode_fields()
    encode = msgspec.msgpack.encode
    return {f.encode_name: encode(getattr(state, f.name)) for f in msgspec.structs.fields(state)}


class LazyStruct:
    """A ``struct_type`` instance read from its sections (:func:`encode_fields`), field by field.

    Attribute reads decode that field on first access (later reads return the same object, so
    in-place updates by a fold stick); attribute writes replace the field; a field without a
    section takes its default. :meth:`encode_fields` returns the sections of the current value;
    :meth:`materialize` returns the Struct itself. Only fields of ``struct_type`` are attributes.

    Raises: msgspec.DecodeError / ValidationError at first access of a malformed section;
    AttributeError for a name that is not a field.
    """

    def __init__(self, struct_type: type[msgspec.Struct], sections: dict[str, bytes]) -> None:
        object.__setattr__(self, "_struct_type", struct_type)
        object.__setattr__(self, "_raw", dict(sections))

    def __getattr__(self, name: str) -> Any:  # only for names not decoded yet
        fields = _fields(self._struct_type)
        if name not in fields:
            raise AttributeError(f"{self._struct_type.__name__} has no field {name!r}")
        raw = self._raw.pop(fields[name].encode_name, None)
        if raw is not None:
            value = _decoder(self._struct_type, name).decode(raw)
        else:
            info = fields[name]
            has_factory = info.default_factory is not msgspec.NODEFAULT
            value = info.default_factory() if has_factory else info.default
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        fields = _fields(self._struct_type)
        if name not in fields:
            raise AttributeError(f"{self._struct_type.__name__} has no field {name!r}")
        self._raw.pop(fields[name].encode_name, None)
        object.__setattr__(self, name, value)

    def decoded_fields(self) -> list[str]:
        """The fields decoded (or assigned) so far, in declaration order."""
        return [name for name in _fields(self._struct_type) if name in self.__dict__]

    def encode_fields(self) -> dict[str, bytes]:
        """The sections of the current value: untouched fields as the bytes they came from,
        decoded fields (which may have been updated in place) encoded again."""
        out: dict[str, bytes] = {}
        for name, info in _fields(self._struct_type).items():
            if name in self.__dict__:
                out[info.encode_name] = msgspec.msgpack.encode(self.__dict__[name])
            elif info.encode_name in self._raw:
                out[info.encode_name] = self._raw[info.encode_name]
        return out

    def materialize(self) -> msgspec.Struct:
        """Decode every remaining field and return the ``struct_type`` instance (sharing the
        already decoded field objects)."""
        return self._struct_type(
            **{name: getattr(self, name) for name in _fields(self._struct_type)}
        )
