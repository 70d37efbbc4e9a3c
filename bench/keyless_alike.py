#!/usr/bin/env python3
"""Keyless conversations that open alike, through a running gateway.

Runs N concurrent chats with no session id (plain Anthropic /v1/messages, streamed), all under
one system prompt, for a few turns each, and prints the share of prompt tokens the replicas read
from their prefix caches (the gateway's admin API) and how many follow-up turns stayed on the
replica of their conversation's previous turn.

  --mode alike       every chat opens with the same first message ("hi"); replies differ (each
                     chat asks for a different max_tokens: the simulator's reply to one prompt
                     is always the same, a sampling model's is not)
  --mode same-reply  the same opening and identical replies (greedy decoding)
  --mode distinct    every chat opens with a first message of its own

Start the gateway first, e.g.  build/warden serve --demo --time-scale 20 --listen 127.0.0.1:18930
then  bench/keyless_alike.py --port 18930 --mode alike.  Python standard library only.
"""
import argparse
import http.client
import json
import random
import threading


def words(seed, n):
    rng = random.Random(seed)
    vocabulary = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta"]
    return " ".join(rng.choice(vocabulary) + str(rng.randint(0, 999)) for _ in range(n))


def post(port, body):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/v1/messages", json.dumps(body), {"content-type": "application/json"})
    response = connection.getresponse()
    data = response.read().decode()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {data[:200]}")
    text = ""
    for line in data.splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event.get("type") == "content_block_delta":
                text += event["delta"].get("text", "")
    return response.getheader("x-warden-replica"), text


def chat(args, i, replicas):
    first = "hi" if args.mode != "distinct" else f"hi, I am chat {i}"
    messages = [{"role": "user", "content": first}]
    system = "You are a helpful assistant. " + words("system", args.system_words)
    seen = []
    for turn in range(args.turns):
        body = {"model": args.model, "stream": True, "system": system, "messages": messages,
                "max_tokens": 60 if args.mode == "same-reply" else 40 + 7 * i}
        replica, text = post(args.port, body)
        seen.append(replica)
        messages = messages + [{"role": "assistant", "content": text},
                               {"role": "user", "content": words(f"{i}-{turn}", args.turn_words)}]
    replicas[i] = seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["alike", "same-reply", "distinct"], default="alike")
    parser.add_argument("--chats", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--system-words", type=int, default=3000)
    parser.add_argument("--turn-words", type=int, default=400)
    parser.add_argument("--model", default="qwen3-4b-dp4")
    args = parser.parse_args()

    replicas = {}
    threads = [threading.Thread(target=chat, args=(args, i, replicas)) for i in range(args.chats)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(replicas) != args.chats:
        raise SystemExit("some chats failed")

    connection = http.client.HTTPConnection("127.0.0.1", args.port)
    connection.request("GET", "/warden/v1/models/" + args.model)
    model = json.loads(connection.getresponse().read())
    totals = model["totals"]
    stayed = sum(a == b for seen in replicas.values() for a, b in zip(seen, seen[1:]))
    follow_ups = sum(len(seen) - 1 for seen in replicas.values())
    print(f"mode {args.mode}: cached share {totals['cached_share']:.3f}, "
          f"stayed on the previous turn's replica {stayed}/{follow_ups}, "
          f"conversations known {model['sessions']['known']}")


if __name__ == "__main__":
    main()
