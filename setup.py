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
        'flax>=0.12.8,<0.13',
        'jax>=0.10.2,<0.12',
        'ml-collections>=1.1,<2',
        'numpy>=2.0',
        'optax>=0.2.8,<0.3',
        'orbax-checkpoint>=0.12.8,<0.13',
        'sentencepiece>=0.2.1,<0.3',
        'tensorboardX>=2.6',
    ],
    extras_require={
        # torch is pinned: an unpinned torch pulls several GB of CUDA packages.
        'test': ['pytest>=8', 'torch==2.13.0', 'transformers==5.23.0'],
    },
)
