"""Export a run for use without its run folder, and run it on CTranslate2 (issue 17).

- ``folder.py``: ``attnlab export RUN OUT`` writes config.json, model.safetensors and one Hugging Face
  ``tokenizers`` file per language (the layout, and its reader, are in :mod:`attnlab.runs`);
- ``standalone.py``: what a tool outside attnlab needs: the HF tokenizer files complete with their
  post-processor (``<eos>``), decoder and special tokens, and ``ctranslate2/decode.json``, the decode
  settings CTranslate2's model folder cannot hold;
- ``ct2.py``: ``--format ctranslate2`` converts the Transformer or decoder-only model through
  CTranslate2's spec API;
- ``engine.py``: :class:`~attnlab.export.engine.CT2Translator`, the Translator whose search runs in
  CTranslate2 (``attnlab translate OUT --engine ctranslate2``, ``attnlab serve OUT``);
- ``commands.py``: the ``export`` command.

This file stays light (no torch): the CLI imports the command module to build its parser.
"""

FORMATS = ("safetensors", "ctranslate2")
QUANTIZATIONS = ("float32", "int8")
ENGINES = ("attnlab", "ctranslate2")  # `attnlab translate --engine`
