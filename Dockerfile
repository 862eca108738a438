# A Beam Python SDK worker image with token-windows installed, for runners whose workers
# cannot install the project themselves: Flink (as a DOCKER environment, or as the EXTERNAL
# worker-pool sidecar of each TaskManager) and Dataflow (--sdk_container_image).
#
# NOT BUILT IN CI (there is no Docker there); the job's portable path is tested instead with
# Beam's worker pool on the host (tests/job/test_runners.py).
#
#   docker build -t REGISTRY/token-windows-worker:0.1.0 .
#   docker push REGISTRY/token-windows-worker:0.1.0
#
# Worker-pool sidecar (Flink, --environment_type=EXTERNAL --environment_config=localhost:50000):
#   docker run --rm -p 50000:50000 REGISTRY/token-windows-worker:0.1.0 --worker_pool
#
# Keep BEAM_VERSION and PYTHON_VERSION equal to the launcher's (`pip show apache-beam`,
# `python -V`): the SDK harness and the submitting SDK must match.
ARG PYTHON_VERSION=3.11
ARG BEAM_VERSION=2.77.0
FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}

WORKDIR /opt/token-windows
COPY setup.py README.md ./
COPY transforms/ transforms/
COPY pipeline/ pipeline/
COPY reader/ reader/

# The image's apache-beam stays as it is (a constraint, so pip never swaps the SDK harness);
# numpy, pyarrow, sentencepiece and zstandard resolve within setup.py's ranges. torch is an
# extra and is not installed: workers never import the reader.
# gcc builds the dedup pass's C kernel (transforms/dedup/kernel.py; without it the pass hashes
# with NumPy, the same keys, about 2.6 times slower): installed only if the image lacks it.
RUN command -v gcc > /dev/null || (apt-get update \
        && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*)
RUN python -c "import apache_beam; print('apache-beam==' + apache_beam.__version__)" \
        > /tmp/beam-constraint.txt \
    && pip install --no-cache-dir --constraint /tmp/beam-constraint.txt . \
    && rm /tmp/beam-constraint.txt \
    && python -c "import pipeline.graph, transforms.plan.windows; print('token-windows installed')" \
    && python -c "from transforms.dedup import kernel; assert kernel.available, 'no dedup kernel'"

# The entry point stays the SDK image's own /opt/apache/beam/boot.
