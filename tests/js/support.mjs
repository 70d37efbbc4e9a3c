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
      const m = /listening https?:\/\/[0-9.]+:([0-9]+)/.exec(line);
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

// Runs `command` with `args`; resolves to { code, stdout, stderr } when it exits. One still running
// after `timeoutMs` is killed and rejects with what it printed; one that cannot start rejects.
export function runCommand(command, args, { cwd, env, timeoutMs = 60000 } = {}) {
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} still running after ${timeoutMs} ms:\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

// The access-log lines (`warden serve --access-log`) among `lines` of the requests to `path` (with
// any query): { method, target, status, and each of the line's name=value fields }, the fields
// that are numbers as numbers.
export function accessLog(lines, path) {
  const entries = [];
  for (const line of lines) {
    const m = /\] ([A-Z]+) (\S+) (\d{3}) \S+(.*)$/.exec(line);
    if (!m || m[2].split('?')[0] !== path) continue;
    const entry = { method: m[1], target: m[2], status: Number(m[3]) };
    for (const field of m[4].trim().split(/\s+/)) {
      const at = field.indexOf('=');
      if (at <= 0) continue;
      const value = field.slice(at + 1);
      entry[field.slice(0, at)] = /^-?[0-9.]+$/.test(value) ? Number(value) : value;
    }
    entries.push(entry);
  }
  return entries;
}

// A request's access-log line is written as its exchange ends, which may be just after its client
// has the answer: waits (a bounded poll) until there are `count` such lines, and returns them.
export async function accessLogOf(lines, path, count) {
  for (let tries = 0; accessLog(lines, path).length < count && tries < 200; ++tries)
    await new Promise((resolve) => setTimeout(resolve, 25));
  return accessLog(lines, path);
}
