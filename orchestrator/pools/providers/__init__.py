"""Parsl execution providers that Parsl itself no longer ships."""

from .cobalt import CobaltProvider

__all__ = ["CobaltProvider"]
