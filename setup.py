"""electra_jax: ELECTRA pretraining in JAX/Flax."""

import setuptools

setuptools.setup(
  name='electra_jax',
  version='0.1.0',
  description='ELECTRA pretraining (replaced token detection) in JAX/Flax, TPU-first.',
  python_requires='>=3.10',
  packages=setuptools.find_packages(include=['electra_jax', 'electra_jax.*', 'configs']),
  # Tested versions; JAX, Flax and Orbax change their APIs often, so minor
  # versions are bounded.
  install_requires=[
    'absl-py>=2.1',
    'array-record>=0.8.6,<0.9',
    # Every path through etils.epath (storage.py); gcsfs serves its gs:// and
    # brings google-cloud-storage, which tensorboardX uses for event files there.
    'etils[epath]>=1.15',
    'flax>=0.12.8,<0.13',
    'gcsfs>=2026.10',
    'grain>=0.2.18,<0.3',
    # tensorflow-datasets imports it when it builds or opens datasets but
    # does not declare it.
    'importlib_resources>=6',
    'jax>=0.10.2,<0.12',
    'ml-collections>=1.1,<2',
    'numpy>=2.0',
    'optax>=0.2.8,<0.3',
    'orbax-checkpoint>=0.12.8,<0.13',
    # HF-format export and import (model.safetensors).
    'safetensors>=0.4',
    'sentencepiece>=0.2.1,<0.3',
    'tensorboardX>=2.6',
    # Read without TensorFlow (ArrayRecord-format datasets); TFRecord ones
    # also need tensorflow-cpu.
    'tensorflow-datasets>=4.9.10,<5',
    # build_vocab's WordPiece trainer.
    'tokenizers>=0.20,<1',
    'tqdm>=4.66',
  ],
  extras_require={
    # torch is pinned: an unpinned torch pulls several GB of CUDA packages.
    # tensorflow-cpu: builds and streams a TFRecord-format TFDS dataset in
    # the tests (reading ArrayRecord-format ones needs no TensorFlow).
    # pytest-xdist: the suite runs on 2 worker processes, one test file each.
    # gcp-storage-emulator: the local GCS server of tests/test_gcs.py.
    # nbclient, nbformat, ipykernel: the Colab notebook is executed in a test.
    # ruff: the linter and formatter that .ci/run applies (pyproject.toml),
    # pinned so that its style does not move under us.
    # jax[tpu] brings the libtpu that matches jax: on a TPU VM it runs the
    # code, elsewhere it compiles for TPU slices (electra_jax.aot).
    'tpu': ['jax[tpu]>=0.10.2,<0.12'],
    'test': [
      'pytest>=8',
      'pytest-xdist>=3.5,<4',
      'gcp-storage-emulator>=2026.7',
      'scipy>=1.10',
      'tensorflow-cpu==2.21.0',
      'torch==2.13.0',
      'transformers==5.23.0',
      'jax[tpu]>=0.10.2,<0.12',
      'nbclient>=0.10,<0.12',
      'nbformat>=5.10,<6',
      'ipykernel>=6.29,<8',
      'ruff==0.17.6',
    ],
  },
)
