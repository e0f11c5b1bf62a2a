"""Old import path kept for users: the Recorder now lives in :mod:`replay_harness.recording.recorder`."""
from replay_harness.recording.recorder import Recorder  # noqa: F401
