"""The one way replay writes or deletes anything the user named (docs/HARDENING.md, "Writes and deletes").

Every output of the program goes through here: recordings (`record --out`, `synth --out`, the pytest
plugin's ``--replay-update``, :class:`~replay_harness.recording.store.RecordingWriter`'s step files and
manifest), their replacement under ``--overwrite`` (staging folder, swap, delete of the old one),
``--json-file``, ``--csv``, ``--png``, ``--save-baseline`` and ``validate --clean-tmp``.
``tests/test_guarded_writes.py`` fails when a module elsewhere opens a file for writing, unlinks, renames
or removes a tree on a user path.

* :mod:`~replay_harness.guarded.mounts`: where a folder lies on its file system, through the mount table
  (a bind mount is the folder it shows);
* :mod:`~replay_harness.guarded.inputs`: the identities and places of what a command reads;
* :mod:`~replay_harness.guarded.claims`: an output path checked once against them, before any work, its
  parent held open for the writer;
* :mod:`~replay_harness.guarded.folders`: writes, renames and deletes relative to an open folder's
  descriptor (O_NOFOLLOW, O_EXCL), deletes that never follow a link or cross a mount.
"""
from replay_harness.guarded.claims import (Claim, Pinned, claim, claimed, discard_unfinished, release,  # noqa: F401
                                            write_file)
from replay_harness.guarded.folders import TMP_SUFFIX, Folder, special_kind  # noqa: F401
from replay_harness.guarded.inputs import WALK_LIMIT, Inputs  # noqa: F401
