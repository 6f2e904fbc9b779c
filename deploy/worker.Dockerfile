# One TFF worker of a tff_idp fleet (README "Running on several machines").
#
# Build from the repository root:
#   docker build -f deploy/worker.Dockerfile -t tff-idp-worker .
# Plaintext gRPC on every interface of the container (--insecure_plaintext, the CMD
# below), for a trusted cluster network only:
#   docker run --rm -p 8000:8000 tff-idp-worker
# TLS (mutual TLS with --tls_client_ca): the stock worker_binary's plaintext
# --internal_port listens on the container's loopback only.
#   docker run --rm -p 8443:8443 -v "$PWD/certs:/certs:ro" tff-idp-worker \
#     --port=8443 --listen_address=0.0.0.0 --internal_port=8001 \
#     --tls_cert=/certs/worker.pem --tls_key=/certs/worker.key --tls_client_ca=/certs/ca.pem
# GPU: base the image on an nvidia/cuda runtime image, install
# "tensorflow[and-cuda]==2.14.1", run with --gpus=all and pass --device=gpu.
#
# A worker executes whatever TFF computation it is sent (arbitrary TensorFlow
# graphs, which can read files and open connections): never publish its port
# to an untrusted network.
FROM python:3.11-slim

# jemalloc keeps the worker's memory flat over long runs (see tff_idp/runtime.py).
# gcc and libc6-dev build the loopback library (tff_idp/execution/listen_address.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjemalloc2 gcc libc6-dev \
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
RUN useradd --system --no-create-home tffworker \
 && install -d -o tffworker -m 0700 /opt/tff_idp/cache
USER tffworker
ENV TF_CPP_MIN_LOG_LEVEL=2 XDG_CACHE_HOME=/opt/tff_idp/cache
RUN python -c "from tff_idp.execution import listen_address as l; print(l.shim_path())"
EXPOSE 8000
ENTRYPOINT ["python", "-m", "tff_idp.execution.worker"]
CMD ["--port=8000", "--listen_address=0.0.0.0", "--insecure_plaintext"]
