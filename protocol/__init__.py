"""Sans-IO bunqueue protocol: framing, command types and validation, reply encoding.

Nothing here performs I/O, reads a clock or imports `broker`.
"""

from .codec import Rejected, append_frame, decode_any, decode_command, encode
from .errors import CommandError, FrameTooLarge, ProtocolError
from .framing import MAX_FRAME_SIZE, FrameDecoder, frame

__all__ = [
    "MAX_FRAME_SIZE",
    "CommandError",
    "FrameDecoder",
    "FrameTooLarge",
    "ProtocolError",
    "Rejected",
    "append_frame",
    "decode_any",
    "decode_command",
    "encode",
    "frame",
]
