"""Old import path kept for users: the recording format now lives in :mod:`replay_harness.recording.store`."""
from replay_harness.recording.store import Emitted, Recording, RecordingWriter, StepRecord  # noqa: F401
