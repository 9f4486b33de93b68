# Sourced by the device-machine scripts (from the repository root): puts MLX's staged site
# (../shared/device/prepare-mlx-cuda.sh installs it in /root/mlx-site) on PYTHONPATH, sets `out` to the
# results folder (OUT, or /tmp/ksearch-out; created) and `bin` to the ksearch binary to run. KSEARCH_BIN wins; else
# .device/binz/ksearch.gz, unpacked (a stripped binary beside MLX's second half exceeds a call's 64 MiB
# carry, gzipped it fits: `gzip -9 -c target/release/ksearch > .device/binz/ksearch.gz` after `strip`);
# else .device/bin/ksearch.
bin=${KSEARCH_BIN:-}
if [ -z "$bin" ]; then
  if [ -f .device/binz/ksearch.gz ]; then
    bin=/tmp/ksearch-device-bin
    [ -x "$bin" ] && [ "$bin" -nt .device/binz/ksearch.gz ] || { gzip -dc .device/binz/ksearch.gz > "$bin" && chmod +x "$bin"; }
  else
    bin=.device/bin/ksearch
  fi
fi
export PYTHONPATH=/root/mlx-site${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/ksearch-out}
mkdir -p "$out"
