# One TFF worker of a tff_idp fleet (README "Running on several machines").
#
# Build from the repository root:
#   docker build -f deploy/worker.Dockerfile -t tff-idp-worker .
# Plaintext gRPC, for a trusted cluster network only:
#   docker run --rm -p 8000:8000 tff-idp-worker
# TLS (mutual TLS with --tls_client_ca): only the TLS port is published; the
# stock worker_binary's plaintext --internal_port stays inside the container.
#   docker run --rm -p 8443:8443 -v "$PWD/certs:/certs:ro" tff-idp-worker \
#     --port=8443 --internal_port=8001 \
#     --tls_cert=/certs/worker.pem --tls_key=/certs/worker.key --tls_client_ca=/certs/ca.pem
# GPU: base the image on an nvidia/cuda runtime image, install
# "tensorflow[and-cuda]==2.14.1", run with --gpus=all and pass --device=gpu.
#
# A worker executes whatever TFF computation it is sent (arbitrary TensorFlow
# graphs, which can read files and open connections): never publish its port
# to an untrusted network.
FROM python:3.11-slim

# jemalloc keeps the worker's memory flat over long runs (see tff_idp/runtime.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjemalloc2 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tff_idp
# The same pinned stack as `make install`: TFF 0.87 without its unservable jax pin.
COPY requirements.txt requirements-tff.txt ./
RUN pip install --no-cache-dir -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-tff.txt
COPY setup.cfg setup.py ./
COPY tff_idp ./tff_idp
COPY datasets ./datasets
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
 && python -c "import tff_idp.execution.runtime as r, os; assert os.path.isfile(r.worker_binary_path())"

# Runs as an unprivileged user; SIGTERM (docker stop) stops the worker cleanly.
RUN useradd --system --no-create-home tffworker
USER tffworker
ENV TF_CPP_MIN_LOG_LEVEL=2
EXPOSE 8000
ENTRYPOINT ["python", "-m", "tff_idp.execution.worker"]
CMD ["--port=8000"]
