"""HF transformers interop, prediction and evaluation, on a real checkpoint.

The workdir fixture holds a real orbax checkpoint, written by the code the
trainer uses, of a small model over BERT's uncased vocabulary with random
weights: interop and the CLIs need real files, not a trained model.
"""

import json
import os
import shlex

import jax
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from configs import tiny
from electra_jax import (
  checkpointing,
  export,
  hf_interop,
  optim,
  pretrained,
  sharding,
  train,
)
from electra_jax.data import shard_writer, sources, tokenizers
from electra_jax.metric_writer import read_scalars
from tests.conftest import data_dir, perturbed, require, run_module

torch = require('torch')
transformers = require('transformers')


def _vocab() -> str:
  return str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')


def _config(objective='electra', embedding_sharing='tied'):
  config = tiny.get_config()
  config.model.vocab_size = 30522
  config.model.num_layers = 3
  config.objective.name = objective
  config.model.embedding_sharing = embedding_sharing
  return config


@pytest.fixture(scope='module')
def workdir(tmp_path_factory) -> str:
  return _workdir(str(tmp_path_factory.mktemp('workdir')), _config())


@pytest.fixture(scope='module')
def replace_mlm_workdir(tmp_path_factory) -> str:
  return _workdir(str(tmp_path_factory.mktemp('replace_mlm')), _config('replace_mlm'))


@pytest.fixture(scope='module')
def held_out(tmp_path_factory) -> str:
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_99', max_seq_length=64, vocab=_vocab()
  )
  return shard_writer.prepare(
    options, str(tmp_path_factory.mktemp('held_out')), num_workers=1, progress=False
  ).directory


def _workdir(directory: str, config) -> str:
  """A pretraining workdir: a checkpoint at step 7 and the tokenizer, as train writes them."""
  tokenizer = tokenizers.copy_tokenizer_file(
    tokenizers.WordPieceTokenizer(_vocab()), os.path.join(directory, 'tokenizer')
  )
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  with jax.set_mesh(mesh):
    state, _ = train.create_train_state(
      config, train.build_model(config), optim.create_optimizer(config), mesh
    )
    # Random biases and LayerNorm parameters too, so that every mapping shows.
    state = state.replace(params=perturbed(state.params, 1, 0.05))
    manager = checkpointing.create_manager(directory, config)
    checkpointing.save(
      manager,
      7,
      state,
      {'next_index': 7},
      checkpointing.checkpoint_meta(config, 7, tokenizer.spec(), 'none'),
    )
    manager.wait_until_finished()
    manager.close()
  return directory


def _inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(1000, 30000, (2, 24))
  ids[:, 0], ids[:, -1] = 101, 102
  mask = np.ones_like(ids)
  mask[1, 17:] = 0
  types = np.zeros_like(ids)
  types[:, 12:] = 1
  return ids, mask, types, np.array([[1, 5, 9], [2, 3, 16]])


def test_export_loads_in_transformers_with_matching_logits(workdir, tmp_path):
  out = tmp_path / 'hf'
  result = run_module(
    'electra_jax.export', f'--workdir={workdir}', f'--output={out}', '--generator'
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'wrote {out} (step 7)' in result.stdout
  # Every file gets the user's normal mode (safetensors alone would write 0600).
  umask = os.umask(0)
  os.umask(umask)
  modes = {
    str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in out.rglob('*') if p.is_file()
  }
  assert 'generator/model.safetensors' in modes
  assert set(modes.values()) == {oct(0o666 & ~umask)}, modes

  source = pretrained.load(workdir)
  model = train.build_model(source.config)
  ids, mask, types, positions = _inputs()
  ours_gen, ours_disc = model.apply({'params': source.params}, ids, types, mask, positions)
  disc = transformers.ElectraForPreTraining.from_pretrained(out).eval()
  gen = transformers.ElectraForMaskedLM.from_pretrained(out / 'generator').eval()
  with torch.no_grad():
    args = dict(
      input_ids=torch.tensor(ids),
      attention_mask=torch.tensor(mask),
      token_type_ids=torch.tensor(types),
    )
    hf_disc = disc(**args).logits.numpy()
    hf_gen = np.take_along_axis(gen(**args).logits.numpy(), positions[..., None], axis=1)
  real = mask.astype(bool)
  disc_err = np.abs(hf_disc - np.asarray(ours_disc))[real].max()
  gen_err = np.abs(hf_gen - np.asarray(ours_gen)).max()
  print(f'export parity: discriminator {disc_err:.2e}, generator {gen_err:.2e}')
  assert disc_err < 1e-4 and gen_err < 1e-4
  assert np.abs(hf_disc).max() > 0.1

  # The tokenizer files load as HF's ElectraTokenizer and give our ids.
  hf_tokenizer = transformers.ElectraTokenizer.from_pretrained(out)
  text = "The Naïve chef cooked 3 meals, didn't she?"
  assert (
    hf_tokenizer(text, add_special_tokens=False)['input_ids']
    == (source.tokenizer.encode([text])[0])
  )


@pytest.mark.parametrize('safetensors', [True, False])
def test_import_then_export_is_lossless(tmp_path, safetensors):
  config = transformers.ElectraConfig(
    vocab_size=30522,
    embedding_size=64,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=512,
    max_position_embeddings=64,
  )
  torch.manual_seed(0)
  original = transformers.ElectraForPreTraining(config)
  original.save_pretrained(tmp_path / 'original', safe_serialization=safetensors)
  with open(_vocab()) as f:
    (tmp_path / 'original' / 'vocab.txt').write_text(f.read())
  result = run_module(
    'electra_jax.export', f'--workdir={tmp_path / "original"}', f'--output={tmp_path / "again"}'
  )
  assert result.returncode == 0, result.stderr[-3000:]
  before = {k: v.numpy() for k, v in original.state_dict().items()}
  after = safetensors_numpy.load_file(str(tmp_path / 'again' / 'model.safetensors'))
  # HF keeps position ids as a buffer in some versions; every weight must match.
  assert set(after) == {k for k in before if not k.endswith('position_ids')}
  for name, value in after.items():
    np.testing.assert_array_equal(value, before[name], err_msg=name)
  with open(tmp_path / 'again' / 'config.json') as f:
    assert json.load(f)['num_hidden_layers'] == 2


def test_predict_shows_each_token(workdir):
  result = run_module('electra_jax.predict', f'--workdir={workdir}', 'The chef cooked the meal.')
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.strip().splitlines()
  # Header, then [CLS] the chef cooked the meal . [SEP].
  assert len(lines) == 9 and lines[2].split()[1] == 'the' and lines[-1].split()[1] == '[SEP]'
  assert all(0 <= float(line.split()[2]) <= 1 for line in lines[1:])

  result = run_module(
    'electra_jax.predict',
    f'--workdir={workdir}',
    '--corrupt',
    '--mask_prob=0.5',
    'The chef cooked the meal in the old kitchen.',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'replaced?' in result.stdout
  assert 'yes (was ' in result.stdout
  assert 'tokens replaced; the discriminator flags' in result.stdout.strip().splitlines()[-1]


def test_evaluate_reports_auc_on_held_out_data(workdir, held_out, tmp_path, tiny_tokenizer):
  result = run_module(
    'electra_jax.evaluate', f'--workdir={workdir}', f'--data={held_out}', '--num_batches=3'
  )
  assert result.returncode == 0, result.stderr[-3000:]
  last = result.stdout.strip().splitlines()[-1]
  assert last.startswith('step 7: mlm_loss=') and 'disc_auc=' in last
  values = _printed(last)
  assert 0 <= values['disc_auc'] <= 1 and values['mlm_loss'] > 0
  assert 0 <= values['context_free_auc'] <= 1
  assert any(name.startswith('events.out.tfevents') for name in os.listdir(workdir))

  # Near temperature 0 every sample is the generator's first choice: a few ids that
  # give the replaced tokens away by themselves (0.96 against 0.78 when written).
  result = run_module(
    'electra_jax.evaluate',
    f'--workdir={workdir}',
    f'--data={held_out}',
    '--num_batches=3',
    '--temperature=1e-4',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  cold = _printed(result.stdout.strip().splitlines()[-1])
  assert cold['mlm_accuracy'] == values['mlm_accuracy']  # The same generator.
  assert cold['context_free_auc'] > values['context_free_auc'] + 0.1
  scalars = read_scalars(workdir)
  assert scalars['eval_t0.0001/sampled_accuracy'] == [
    (7, pytest.approx(cold['sampled_accuracy'], abs=1e-4))
  ]
  assert [step for step, _ in scalars['eval/disc_auc']] == [7]

  # Held-out text prepared with another tokenizer is refused.
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_99',
    max_seq_length=64,
    spm_model=tiny_tokenizer.file_path,
  )
  other = shard_writer.prepare(options, str(tmp_path / 'other'), num_workers=1, progress=False)
  result = run_module('electra_jax.evaluate', f'--workdir={workdir}', f'--data={other.directory}')
  assert result.returncode == 2
  assert 'error: config.model.vocab_size: 30522, but the data in' in result.stderr


def _printed(line: str) -> dict[str, float]:
  """evaluate's closing line, 'step N: name=value, ...', as {name: value}."""
  return {k: float(v) for k, v in (item.split('=') for item in line.split(': ', 1)[1].split(', '))}


def test_evaluate_refuses_a_temperature_it_cannot_sample_at(workdir, held_out, tmp_path):
  bert = _workdir(str(tmp_path / 'mlm'), _config('mlm'))
  result = run_module(
    'electra_jax.evaluate', f'--workdir={bert}', f'--data={held_out}', '--temperature=1'
  )
  assert result.returncode == 2
  assert (
    f"error: --temperature: {bert} was pretrained with objective 'mlm', which samples nothing"
    in result.stderr
  )
  result = run_module(
    'electra_jax.evaluate', f'--workdir={workdir}', f'--data={held_out}', '--temperature=0'
  )
  assert result.returncode == 2
  assert 'error: --temperature: must be > 0, got 0.0' in result.stderr


def test_evaluate_without_data_prints_the_command_that_prepares_it(workdir, tmp_path):
  result = run_module('electra_jax.evaluate', f'--workdir={workdir}', '--num_batches=1')
  assert result.returncode == 2
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith('error: --data: the run has no config.eval.prepared_dir')
  # The command as printed, with the user's two words filled in, prepares data that
  # the run evaluates on.
  command = shlex.split(error.split(': python ', 1)[1])
  assert command[:2] == ['-m', 'electra_jax.prepare_data']
  assert f'--vocab={workdir}/tokenizer/bert-base-uncased-vocab.txt' in command
  held_out = tmp_path / 'held_out'
  corpus = f'wiki:{data_dir()}/wikipedia/AA/wiki_98'
  args = [
    a.replace('HELD_OUT_CORPUS', corpus).replace('HELD_OUT_DIR', str(held_out)) for a in command[2:]
  ]
  result = run_module('electra_jax.prepare_data', *args)
  assert result.returncode == 0, result.stderr[-3000:]
  result = run_module(
    'electra_jax.evaluate', f'--workdir={workdir}', f'--data={held_out}', '--num_batches=1'
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'disc_auc=' in result.stdout.strip().splitlines()[-1]


def test_evaluate_refuses_the_same_vocabulary_prepared_cased(workdir, tmp_path):
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_99',
    max_seq_length=64,
    vocab=_vocab(),
    lower_case=False,
  )
  cased = shard_writer.prepare(options, str(tmp_path / 'cased'), num_workers=1, progress=False)
  result = run_module('electra_jax.evaluate', f'--workdir={workdir}', f'--data={cased.directory}')
  assert result.returncode == 2
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith(f'error: --data: {cased.directory} was tokenized with ')
  assert 'lower_case=False' in error and 'lower_case=True' in error
  assert error.endswith(
    f'--vocab={workdir}/tokenizer/bert-base-uncased-vocab.txt --max_seq_length=64'
  )


def _hf_logits(model, ids, mask, types):
  with torch.no_grad():
    return model(
      input_ids=torch.tensor(ids),
      attention_mask=torch.tensor(mask),
      token_type_ids=torch.tensor(types),
    ).logits.numpy()


def test_a_masked_lm_objective_exports_its_full_size_network(replace_mlm_workdir, tmp_path):
  out = tmp_path / 'hf'
  result = run_module(
    'electra_jax.export', f'--workdir={replace_mlm_workdir}', f'--output={out}', '--generator'
  )
  assert result.returncode == 0, result.stderr[-3000:]
  with open(out / 'config.json') as f:
    assert json.load(f)['architectures'] == ['ElectraForMaskedLM']
  source = pretrained.load(replace_mlm_workdir)
  model = source.pretraining_model()
  ids, mask, types, positions = _inputs()
  ours_gen, ours_main = model.apply({'params': source.params}, ids, types, mask, positions)
  hf_main = np.take_along_axis(
    _hf_logits(transformers.ElectraForMaskedLM.from_pretrained(out).eval(), ids, mask, types),
    positions[..., None],
    axis=1,
  )
  hf_gen = np.take_along_axis(
    _hf_logits(
      transformers.ElectraForMaskedLM.from_pretrained(out / 'generator').eval(), ids, mask, types
    ),
    positions[..., None],
    axis=1,
  )
  main_err, gen_err = np.abs(hf_main - ours_main).max(), np.abs(hf_gen - ours_gen).max()
  print(f'masked-LM export parity: full size {main_err:.2e}, generator {gen_err:.2e}')
  assert main_err < 1e-4 and gen_err < 1e-4
  assert np.abs(hf_main - hf_gen).max() > 0.1  # Two different networks.


def test_gdes_exports_the_residual_folded_into_one_table(tmp_path):
  workdir = _workdir(str(tmp_path / 'gdes'), _config(embedding_sharing='gdes'))
  result = run_module('electra_jax.export', f'--workdir={workdir}', f'--output={tmp_path / "hf"}')
  assert result.returncode == 0, result.stderr[-3000:]
  source = pretrained.load(workdir)
  assert source.embedding_sharing == 'gdes'
  ids, mask, types, _ = _inputs()
  model = source.pretraining_model()
  ours = model.apply({'params': source.params}, ids, types, mask, method=model.discriminator_logits)
  hf = _hf_logits(
    transformers.ElectraForPreTraining.from_pretrained(tmp_path / 'hf').eval(), ids, mask, types
  )
  real = mask.astype(bool)
  assert np.abs(hf - np.asarray(ours))[real].max() < 1e-4
  # Fine-tuning starts from the same folded table.
  folded = source.discriminator_params()['embeddings']['word_embeddings']['embedding']
  np.testing.assert_allclose(
    folded,
    source.params['embeddings']['word_embeddings']['embedding']
    + source.params['discriminator_embeddings']['word_embeddings']['embedding'],
  )


def test_evaluate_and_predict_a_masked_lm(replace_mlm_workdir, held_out):
  result = run_module(
    'electra_jax.evaluate',
    f'--workdir={replace_mlm_workdir}',
    f'--data={held_out}',
    '--num_batches=2',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  values = dict(
    item.split('=') for item in result.stdout.strip().splitlines()[-1].split(': ', 1)[1].split(', ')
  )
  # The generator's and the full-size masked LM's metrics; no discriminator.
  assert {
    'mlm_loss',
    'mlm_accuracy',
    'sampled_accuracy',
    'main_mlm_loss',
    'main_mlm_accuracy',
  } == set(values)
  assert float(values['main_mlm_loss']) > 0

  result = run_module(
    'electra_jax.predict',
    f'--workdir={replace_mlm_workdir}',
    '--mask_prob=0.5',
    'The chef cooked the meal in the old kitchen.',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.strip().splitlines()
  assert lines[0].split() == ['#', 'input', 'original', 'guess', 'p(original)']
  assert 'tokens masked; the network guesses' in lines[-1]
  guessed = [line.split() for line in lines[1:-1] if len(line.split()) == 5]
  assert guessed and all(0 <= float(row[4]) <= 1 for row in guessed)


def _export_released_layout(workdir: str, hf) -> None:
  """The released layout: an ElectraForPreTraining directory with vocab.txt, and
  the generator's ElectraForMaskedLM beside it."""
  result = run_module('electra_jax.export', f'--workdir={workdir}', f'--output={hf}', '--generator')
  assert result.returncode == 0, result.stderr[-3000:]


def test_released_hf_checkpoints_read_back_as_pretraining_parameters(workdir, tmp_path):
  hf = tmp_path / 'hf'
  _export_released_layout(workdir, hf)
  config = _config()
  loaded = hf_interop.pretraining_params_from_hf(
    str(hf), str(hf / 'generator'), config, tokenizers.file_sha256(_vocab())
  )
  expected = pretrained.load(workdir).params
  assert jax.tree.structure(loaded) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(expected), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

  # Without the generator's directory, only the discriminator's side is read.
  alone = hf_interop.pretraining_params_from_hf(
    str(hf), None, config, tokenizers.file_sha256(_vocab())
  )
  assert set(alone) == {'embeddings', 'discriminator', 'discriminator_head'}
  with pytest.raises(hf_interop.HFCheckpointError, match="vocab.txt is not the prepared data's"):
    hf_interop.pretraining_params_from_hf(str(hf), None, config, 'the sha256 of another vocabulary')
  # Other sizes are refused, naming the key (the CLI turns this into its one error line).
  config.model.num_layers = 2
  with pytest.raises(hf_interop.HFCheckpointError, match=r'num_layers 3 \(this config: 2\)'):
    hf_interop.pretraining_params_from_hf(str(hf), None, config, tokenizers.file_sha256(_vocab()))


# Two CLI runs of BERT's vocabulary: a minute and a half. The test above reads the
# same checkpoints in process.
@pytest.mark.heavy
def test_continued_pretraining_starts_from_released_hf_checkpoints(workdir, held_out, tmp_path):
  hf = tmp_path / 'hf'
  _export_released_layout(workdir, hf)
  args = [
    'electra_jax.main',
    '--config=configs/tiny.py',
    '--config.model.vocab_size=30522',
    f'--config.data.prepared_dir={held_out}',
    '--config.num_train_steps=2',
    f'--config.checkpoint.init_from={hf}',
  ]
  result = run_module(
    *args,
    '--config.model.num_layers=3',
    f'--config.checkpoint.init_from_generator={hf / "generator"}',
    f'--workdir={tmp_path / "continued"}',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert (
    f'Initialised the parameters from the HF checkpoint {hf} and {hf}/generator' in result.stderr
  )
  # Other sizes are refused before any step, naming the key.
  result = run_module(*args, '--config.model.num_layers=2', f'--workdir={tmp_path / "smaller"}')
  assert result.returncode == 2
  assert 'its discriminator has num_layers 3 (this config: 2)' in result.stderr.splitlines()[-1]


# Korean trains its own sentencepiece model first: heavy, for the suite's time.
@pytest.mark.parametrize('language', ['english', pytest.param('korean', marks=pytest.mark.heavy)])
def test_a_sentencepiece_tokenizer_exports_as_a_fast_tokenizer_with_the_same_ids(
  language, tiny_tokenizer, tmp_path
):
  if language == 'english':
    tokenizer, text = tiny_tokenizer, data_dir() / 'wikipedia' / 'AA' / 'wiki_05'
  else:
    text = data_dir() / 'korean' / 'kowiki' / 'AA' / 'wiki_00'
    lines = (
      line
      for doc in sources.read_documents(sources.WorkUnit('wiki', str(text)), sources.ReadOptions())
      for line in doc
    )
    tokenizer = tokenizers.SentencePieceTokenizer(
      tokenizers.train_sentencepiece(
        lines, str(tmp_path / 'spm'), vocab_size=4000, model_type='unigram', max_sentences=20_000
      )
    )
    text = data_dir() / 'korean' / 'kowiki' / 'AA' / 'wiki_01'
  _exports_our_ids(
    tokenizer, text, ['  two  spaces ', 'tab\there', 'ＦＵＬＬ width ①', ''], tmp_path
  )


def _exports_our_ids(tokenizer, text, more_lines: list[str], tmp_path) -> list[list[int]]:
  """Checks that the exported tokenizer, loaded by AutoTokenizer, gives our ids on the
  first 2,000 lines of the Wikipedia file `text` and on `more_lines`; returns ours."""
  unit = sources.WorkUnit('wiki', str(text))
  lines = [line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc]
  lines = lines[:2000] + more_lines
  (tmp_path / 'hf').mkdir()
  export._write_tokenizer(tokenizer, str(tmp_path / 'hf'), 128)
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / 'hf'))
  ours = tokenizer.encode(lines)
  theirs = hf(lines, add_special_tokens=False)['input_ids']
  assert [i for i in range(len(lines)) if ours[i] != theirs[i]] == []
  pair = hf('a question', 'its context')
  assert pair['input_ids'][0] == tokenizer.cls_id and pair['input_ids'][-1] == tokenizer.sep_id
  assert pair['token_type_ids'][-1] == 1 and hf.mask_token_id == tokenizer.mask_id
  return ours


# The vocab.txt alone would load as ElectraTokenizer, whose normaliser turns Hangul
# into jamo: with a Korean vocabulary every word would be [UNK] in HF and not here.
@pytest.mark.parametrize('language', ['english', 'korean'])
def test_a_wordpiece_tokenizer_exports_as_a_fast_tokenizer_with_the_same_ids(language, tmp_path):
  if language == 'english':
    vocab, text = _vocab(), data_dir() / 'wikipedia' / 'AA' / 'wiki_05'
  else:
    corpus = f'wiki:{data_dir() / "korean" / "kowiki" / "AA" / "wiki_00"}'
    built = run_module(
      'electra_jax.build_vocab', f'--corpus={corpus}', f'--output={tmp_path}', '--vocab_size=8000'
    )
    assert built.returncode == 0, built.stderr[-3000:]
    vocab = str(tmp_path / 'vocab.txt')
    text = data_dir() / 'korean' / 'kowiki' / 'AA' / 'wiki_01'
  tokenizer = tokenizers.WordPieceTokenizer(vocab)
  more = ["The Naïve café, didn't she?", 'ΣΊΣΥΦΟΣ', '東京で 北京', 'e\u0301cole', '']
  ours = _exports_our_ids(tokenizer, text, more, tmp_path)
  unknown = sum(i == tokenizer.unk_id for ids in ours for i in ids) / sum(map(len, ours))
  assert unknown < 0.01, unknown
