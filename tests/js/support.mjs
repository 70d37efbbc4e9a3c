// Starting `warden` from Node tests: the binary comes from WARDEN_BIN (set by ctest).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

// Starts warden with `args`; resolves to { child, ports, lines } once it has printed `listeners`
// "listening http://host:port" lines. `lines` keeps growing with what it prints on standard output
// (its log, e.g. with --access-log). Rejects after `timeoutMs`.
export function startWarden(args, { listeners = 1, timeoutMs = 20000 } = {}) {
  const bin = process.env.WARDEN_BIN;
  if (!bin) throw new Error('WARDEN_BIN is not set');
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const ports = [];
  const lines = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`warden ${args.join(' ')} did not start`));
    }, timeoutMs);
    child.on('exit', (code) => reject(new Error(`warden exited early with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      lines.push(line);
      const m = /listening http:\/\/[0-9.]+:([0-9]+)/.exec(line);
      if (!m) return;
      ports.push(Number(m[1]));
      if (ports.length === listeners) {
        clearTimeout(timer);
        resolve({ child, ports, lines });
      }
    });
  });
}

export function stopWarden(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.removeAllListeners('exit');
    child.on('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
