"""Data made in the package or shipped with it (no downloads): dates, sequence tasks, a text corpus.

- ``vocab``: a character vocabulary with padding, start and end tokens, and padded batches.
- ``dates``: human-readable dates paired with ISO dates, with a held-out split by calendar day.
- ``sequences``: copy and reverse tasks of controllable length; the neighbour-labelling task.
- ``evidence``: classification by a few tokens among distractors, and by one key sentence of a
  document (chapter 4).
- ``scenes``: small images of coloured shapes with captions in reading order (chapter 4).
- ``recall``: multi-query associative recall (Zoology's MQAR): key-value pairs, then queries of
  the keys, for the chapter "Beyond softmax".
- ``text``: the one corpus shipped rather than generated, 14 modules of Python's standard
  library (PSF licence), for chapter 8's language models.
"""

from attnlab.data.dates import DATE_FORMATS, date_spans, detect_format, format_date, make_date_pairs
from attnlab.data.evidence import DocumentTask, EvidenceTask, make_document_task, make_evidence_task
from attnlab.data.recall import mqar_batch
from attnlab.data.scenes import (
    COLOURS,
    SCENE_WORDS,
    SHAPES,
    SceneTask,
    caption_text,
    make_scene_splits,
    make_scenes,
)
from attnlab.data.sequences import make_neighbour_task, make_sequence_pairs
from attnlab.data.text import TextCorpus, ngram_distance, python_corpus
from attnlab.data.vocab import Batch, CharVocab, make_batch

__all__ = [
    "COLOURS",
    "DATE_FORMATS",
    "SCENE_WORDS",
    "SHAPES",
    "Batch",
    "CharVocab",
    "DocumentTask",
    "EvidenceTask",
    "SceneTask",
    "TextCorpus",
    "caption_text",
    "date_spans",
    "detect_format",
    "format_date",
    "make_batch",
    "make_date_pairs",
    "make_document_task",
    "make_evidence_task",
    "make_neighbour_task",
    "make_scene_splits",
    "make_scenes",
    "make_sequence_pairs",
    "mqar_batch",
    "ngram_distance",
    "python_corpus",
]
