"""streamapp: Faust-style stream processing whose partition assignment keeps local state."""

from streamapp.app import App
from streamapp.settings import StreamappSettings

__all__ = ["App", "StreamappSettings"]
