// The gateway's own TLS listener through a drain (SIGTERM): a client that pipelined a second
// request in the same TCP segment as its first (two TLS records, read from the socket at once)
// has both answered, the second saying Connection: close, as in clear.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import tls from 'node:tls';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { readFileSync } from 'node:fs';
import { startWarden } from './support.mjs';

const dir = new URL('../fixtures/tls/', import.meta.url).pathname;

function request(body) {
  const text = JSON.stringify(body);
  return `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
         `Content-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`;
}

// TLS over a TCP connection whose outgoing bytes are held while `hold.on` is true, then sent in
// one write: records made one after the other reach the server in one segment.
function heldTls(port, hold) {
  const tcp = net.connect(port, '127.0.0.1');
  const held = [];
  const wire = new Duplex({
    read() {},
    write(chunk, encoding, done) {
      if (hold.on) held.push(chunk);
      else tcp.write(chunk);
      done();
    },
  });
  tcp.on('data', (data) => wire.push(data));
  tcp.on('end', () => wire.push(null));
  tcp.on('close', () => wire.destroy());
  hold.release = () => {
    hold.on = false;
    tcp.write(Buffer.concat(held.splice(0)));
  };
  return tls.connect({ socket: wire, servername: 'localhost', ca: readFileSync(`${dir}localhost-cert.pem`) });
}

test('a request pipelined over TLS is answered through a drain', async () => {
  const gateway = await startWarden(['serve', '--demo', '--time-scale', '5', '--threads', '1',
                                     '--listen', '127.0.0.1:0',
                                     '--tls-cert-file', `${dir}localhost-cert.pem`,
                                     '--tls-key-file', `${dir}localhost-key.pem`]);
  gateway.child.removeAllListeners('exit');
  const exited = new Promise((resolve) => gateway.child.on('exit', resolve));
  const hold = { on: false };
  const socket = heldTls(gateway.ports[0], hold);
  await new Promise((resolve, reject) => {
    socket.once('secureConnect', resolve);
    socket.once('error', reject);
  });
  let received = '';
  let onData = () => {};
  socket.on('data', (data) => { received += data; onData(); });
  const closed = new Promise((resolve) => socket.on('close', resolve));
  const model = 'qwen3-4b-dp4';
  hold.on = true;  // two records, one TCP write
  await new Promise((resolve) => socket.write(request({
    model, max_tokens: 300, stream: true, messages: [{ role: 'user', content: 'the first, streamed' }] }), resolve));
  await new Promise((resolve) => socket.write(request({
    model, max_tokens: 4, messages: [{ role: 'user', content: 'the second' }] }), resolve));
  hold.release();
  await new Promise((resolve) => {
    onData = () => { if (received.includes('content_block_delta')) resolve(); };
    onData();
  });
  gateway.child.kill('SIGTERM');  // a drain, while the first is streaming
  await closed;
  assert.equal(received.split('HTTP/1.1 200 OK').length - 1, 2, received);
  assert.match(received, /\r\nConnection: close\r\n/i, 'the second answer says the connection ends');
  assert.equal(await exited, 0);
});
