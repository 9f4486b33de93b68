# Sourced by the device-machine scripts: sets `bin` to the ksearch binary to run. KSEARCH_BIN wins; else
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
