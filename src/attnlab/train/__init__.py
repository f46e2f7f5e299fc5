"""Training and evaluating sequence-to-sequence models, captioners, classifiers, taggers and
language models.

Introduced in chapter 1 and used by every chapter that trains a translator; chapter 4 adds the
captioners (``train_captioner``, with REINFORCE for hard attention) and the classifiers,
chapter 5 the loop for per-token taggers (``train_tagger``), chapter 8 the language models
(``train_lm``). Training runs for a fixed number of steps (never for a fixed time), so that a
seeded run gives the same model, and the same printed accuracies, every time on the same machine.

Devices: everything runs where the model is. ``device=None`` (the default of every function
here) means the device of the model's parameters; data given on the CPU is moved there batch
by batch. Evaluators never move a model (an explicit ``device`` must be the model's); trainers
move it only when given an explicit ``device``. Every trainer runs the same loop,
``train_loop``, with its own batches and loss (chapter 1 lists it as ``_train_loop``, the
same function).

The modules, by what they hold:

- ``loop``: ``train_loop``, the loop every trainer shares (public: a model of your own can be
  trained by it), what it returns (``TrainHistory``), and where training runs;
- ``schedules``: learning-rate schedules (``warmup_cosine``);
- ``evaluation``: evaluating translators, taggers and classifiers;
- ``decoding``: greedy translation of one string (``translate``);
- ``trainers``: the trainers of translators, taggers and classifiers;
- ``captioning``: the captioners' loss, trainer and evaluation (chapter 4);
- ``language_models``: the language models' objectives, trainer and loss by position (chapter 8);
- ``recall``: multi-query associative recall, a trainer and an accuracy (chapter "Beyond softmax").
"""

from attnlab.train.captioning import (
    CaptionEval,
    caption_loss,
    evaluate_captioner,
    gradient_noise,
    shift_captions,
    train_captioner,
)
from attnlab.train.decoding import translate
from attnlab.train.evaluation import Classifier as Classifier
from attnlab.train.evaluation import (
    EvalResult,
    accuracy_by_length,
    evaluate_classifier,
    evaluate_seq2seq,
    evaluate_tagger,
    seq2seq_loss_by_position,
)
from attnlab.train.evaluation import Pairs as Pairs
from attnlab.train.language_models import LM_OBJECTIVES as LM_OBJECTIVES
from attnlab.train.language_models import evaluate_lm, lm_loss_by_position, lm_token_losses, mask_tokens, train_lm
from attnlab.train.loop import Device as Device
from attnlab.train.loop import TrainHistory, train_loop
from attnlab.train.recall import recall_accuracy, train_recall
from attnlab.train.schedules import warmup_cosine
from attnlab.train.trainers import train_classifier, train_seq2seq, train_tagger

# The name chapter 1 (and the book's how-to-use page) lists the loop by:
# attnlab.listing("attnlab.train._train_loop", "step"). The same function, not a copy.
_train_loop = train_loop

__all__ = [
    "CaptionEval",
    "EvalResult",
    "TrainHistory",
    "accuracy_by_length",
    "caption_loss",
    "evaluate_captioner",
    "evaluate_classifier",
    "evaluate_lm",
    "evaluate_seq2seq",
    "evaluate_tagger",
    "gradient_noise",
    "lm_loss_by_position",
    "lm_token_losses",
    "mask_tokens",
    "recall_accuracy",
    "seq2seq_loss_by_position",
    "shift_captions",
    "train_captioner",
    "train_classifier",
    "train_lm",
    "train_loop",
    "train_recall",
    "train_seq2seq",
    "train_tagger",
    "translate",
    "warmup_cosine",
]
