"""build_vocab through the CLI on real Korean and English Wikipedia."""

from electra_jax.data import shards, sources, tokenizers
from tests.conftest import data_dir, require, run_module


def _kowiki(files: str = '0[0-5]') -> str:
  return f'wiki:{data_dir() / "korean" / "kowiki" / "AA"}/wiki_{files}'


def test_a_korean_vocabulary_prepares_korean_text_without_unknowns(tmp_path):
  result = run_module(
    'electra_jax.build_vocab',
    f'--corpus={_kowiki()}',
    f'--output={tmp_path / "vocab"}',
    '--vocab_size=8000',
    '--unused=10',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  vocab = tmp_path / 'vocab' / 'vocab.txt'
  assert result.stdout.splitlines()[0] == f'{vocab}: 8000 ids'
  pieces = vocab.read_text(encoding='utf-8').splitlines()
  assert pieces[:6] == ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[unused0]']
  assert len(pieces) == len(set(pieces)) == 8000
  tokenizer = tokenizers.WordPieceTokenizer(str(vocab))
  assert tokenizer.unk_id not in tokenizer.encode(['한국어 문장 입니다.'])[0]

  prepared = tmp_path / 'prepared'
  result = run_module(
    'electra_jax.prepare_data',
    f'--corpus={_kowiki("09")}',
    f'--output_dir={prepared}',
    f'--vocab={vocab}',
    '--max_seq_length=128',
    '--num_workers=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  counts = shards.PreparedData.load(str(prepared)).metadata['counts']
  # Text the vocabulary never saw (wiki_09): BERT's English vocabulary leaves
  # over 30% of it [UNK] (test_prepare.py).
  assert counts['unknown_tokens'] < 0.01 * counts['tokens'] and 'WARNING' not in result.stdout


def test_the_same_corpus_gives_the_same_vocabulary(tmp_path):
  # HF tokenizers alone numbers the ##c pieces in hash-map order: before
  # build_vocab sorted them, each pair of builds below differed.
  unit = sources.WorkUnit('wiki', str(data_dir() / 'korean' / 'kowiki' / 'AA' / 'wiki_00'))
  lines = [line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc]
  for limit in (0, 1000):
    built = []
    for run in range(2):
      output = tmp_path / f'{limit}_{run}'
      output.mkdir()
      path = tokenizers.train_wordpiece(
        lines,
        str(output),
        vocab_size=4000,
        lower_case=True,
        strip_accents=True,
        unused=2,
        limit_alphabet=limit,
        min_frequency=2,
      )
      built.append(open(path, encoding='utf-8').read().splitlines())
    assert built[0] == built[1], limit
    pieces = built[0]
    assert len(pieces) == len(set(pieces)) == 4000
    # Specials, unused slots, the characters in order, then their continuing pieces.
    assert pieces[:7] == [*tokenizers.SPECIAL_TOKENS, '[unused0]', '[unused1]']
    characters = [p for p in pieces[7:] if len(p) == 1]
    assert pieces[7 : 7 + len(characters)] == sorted(characters)
    assert pieces[7 + len(characters)].startswith('##')
    if limit:
      assert len(characters) == limit


def test_an_english_vocabulary_cuts_as_transformers_does(tmp_path):
  transformers = require('transformers')
  wiki = data_dir() / 'wikipedia' / 'AA' / 'wiki_07'
  result = run_module(
    'electra_jax.build_vocab',
    f'--corpus=wiki:{wiki}',
    f'--output={tmp_path}',
    '--vocab_size=4000',
    '--lower_case=false',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  ours = tokenizers.WordPieceTokenizer(str(tmp_path / 'vocab.txt'), lower_case=False)
  reference = transformers.BertTokenizer(str(tmp_path / 'vocab.txt'), do_lower_case=False)
  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_08'))
  lines = [line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc][
    :300
  ]
  assert ours.encode(lines) == [reference.encode(line, add_special_tokens=False) for line in lines]
  # Cased: "The" and "the" are both pieces.
  assert {'The', 'the'} <= set((tmp_path / 'vocab.txt').read_text().splitlines())


def test_sentencepiece_and_bad_requests(tmp_path):
  args = (
    'electra_jax.build_vocab',
    f'--corpus={_kowiki("00")}',
    f'--output={tmp_path}',
    '--vocab_size=4000',
    '--type=sentencepiece',
  )
  result = run_module(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  tokenizer = tokenizers.SentencePieceTokenizer(str(tmp_path / 'spm.model'))
  assert tokenizer.vocab_size == 4000 and tokenizer.special_ids == tokenizers.TRAINED_SPECIAL_IDS
  # Built again elsewhere, byte for byte the same: no temporary file names inside.
  again = run_module(*args[:2], f'--output={tmp_path / "again"}', *args[3:])
  assert again.returncode == 0, again.stderr[-3000:]
  assert (tmp_path / 'again' / 'spm.model').read_bytes() == (tmp_path / 'spm.model').read_bytes()
  result = run_module(*args)  # Again, into the same folder.
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
    f'error: --output={tmp_path}: already holds spm.model; choose another folder or delete it'
  )
  result = run_module(
    'electra_jax.build_vocab',
    f'--corpus={_kowiki("00")}',
    f'--output={tmp_path}',
    '--vocab_size=50',
  )
  assert result.returncode == 2
  assert 'error: --vocab_size=50: too small; give at least 105' in result.stderr
  result = run_module(
    'electra_jax.build_vocab',
    f'--corpus={_kowiki("00")}',
    f'--output={tmp_path / "small"}',
    '--vocab_size=1000',
    '--type=sentencepiece',
  )
  assert result.returncode == 2
  assert (
    'error: --vocab_size=1000: sentencepiece could not train it on this corpus' in result.stderr
  )
