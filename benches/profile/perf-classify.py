#!/usr/bin/env python3
"""Group a `perf script` dump of mcp-bridge into where-the-time-goes buckets.

Record (root; this VM has no PMU, so perf samples with cpu-clock):
  perf record -F 2000 -g --call-graph dwarf,16384 -p <bridge pid> -o perf.data -- sleep 4
  perf script -i perf.data -F comm,tid,ip,sym > perf.txt
  python3 benches/profile/perf-classify.py perf.txt

Kernel samples are bucketed by what the kernel was doing and by the user code that entered it;
user samples by the first matching rule (rules are ordered; the first match wins).
"""
import collections
import re
import sys

# Parse `perf script -F comm,tid,ip,sym` output: blocks separated by blank lines.
def samples(path):
    frames=[]; head=None
    for line in open(path, errors='replace'):
        line=line.rstrip('\n')
        if not line.strip():
            if head is not None: yield head, frames
            head=None; frames=[]; continue
        if not line.startswith('\t') and not line.startswith(' '):
            head=line; frames=[]
        else:
            parts=line.strip().split(' ',1)
            sym=parts[1] if len(parts)>1 else ''
            if parts[0].startswith('ffff'): sym='[k] '+sym
            frames.append(sym)
    if head is not None: yield head, frames

KR=[
 ('context switch at syscall/irq exit (preempted: another task of the 2 cores ran)', r'exit_to_user_mode_loop|irqentry_exit'),
 ('TCP send: response to client (loopback: includes delivery + waking the client)', r'tcp_sendmsg|sock_write_iter|do_writev|sock_sendmsg'),
 ('TCP recv', r'tcp_recvmsg|sock_read_iter|sock_recvmsg'),
 ('pipe write to child (includes waking the child)', r'anon_pipe_write|pipe_write'),
 ('pipe read from child', r'anon_pipe_read|pipe_read'),
 ('futex (tokio worker park/unpark, mutex)', r'futex'),
 ('epoll_wait', r'epoll_wait'),
 ('eventfd write (waking the I/O driver)', r'eventfd'),
 ('other syscall', r'do_syscall_64'),
 ('other kernel (irq)', r'.'),
]
UR=[
 ('hyper: request head parse', r'Http1Transaction>::parse'),
 ('hyper: response encode/write', r'Http1Transaction>::encode|poll_flush|poll_write_vectored'),
 ('metrics (prometheus + Metrics::*)', r'prometheus|mcp_bridge::metrics'),
 ('JSON: Envelope::parse (request/response)', r'jsonrpc::Envelope::parse'),
 ('JSON: modern::validate', r'face::modern::validate'),
 ('JSON: meta_field (sniff PV, progressToken)', r'jsonrpc::meta_field'),
 ('JSON: rewrite_request_params / frame builders', r'rewrite_request_params|jsonrpc::request|jsonrpc::result|jsonrpc::error'),
 ('child: on_frame (response routing)', r'ChildUpstream>?::on_frame'),
 ('child: write_stdin task', r'child::(process::)?write_stdin'),
 ('child: read_stdout / LineDecoder', r'read_stdout|LineDecoder'),
 ('tokio worker parking (idle: epoll_wait / futex sleep)', r'Context::park|park_internal|park_driver|Parker::park'),
 ('timers (per-request Sleep: call deadline)', r'tokio::runtime::time|tokio::time::sleep|TimerEntry'),
 ('Responder::respond (select, sinks, oneshot)', r'respond::Responder'),
 ('upstream.call / ready (watch) / start_on', r'ChildUpstream::call|ChildUpstream::ready|start_on|Proc::start|call::sinks'),
 ('body collect', r'Limited|BodyExt|Collect'),
 ('post/handle/run_call (own code, other)', r'face::(http|post|run|session_http|modern)::'),
 ('tokio scheduler / I/O driver', r'tokio::runtime'),
 ('hyper other', r'hyper'),
 ('other', r'.'),
]
kr=[(n,re.compile(p)) for n,p in KR]; ur=[(n,re.compile(p)) for n,p in UR]
K=collections.Counter(); U=collections.Counter(); KU=collections.Counter(); tot=0; kt=0
for h,fr in samples(sys.argv[1]):
    tot+=1
    kf=[]; i=0
    while i<len(fr) and fr[i].startswith('[k]'): kf.append(fr[i]); i+=1
    uf=[f for f in fr[i:] if not f.startswith('[k]')]
    us='\n'.join(uf)
    if kf:
        kt+=1
        ks='\n'.join(kf)
        K[next(n for n,r in kr if r.search(ks))]+=1
        KU[next(n for n,r in ur if r.search(us))]+=1
    else:
        U[next(n for n,r in ur if r.search(us))]+=1
print(f"samples {tot}; in kernel {100*kt/tot:.1f}%")
print("== kernel samples, by what the kernel was doing (% of all samples) ==")
for n,c in K.most_common(): print(f"{100*c/tot:6.1f}%  {n}")
print("== kernel samples, by the user code that entered the kernel ==")
for n,c in KU.most_common(): print(f"{100*c/tot:6.1f}%  {n}")
print("== user-space samples (% of all samples) ==")
for n,c in U.most_common(): print(f"{100*c/tot:6.1f}%  {n}")
