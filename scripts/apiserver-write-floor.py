#!/usr/bin/env python3
"""The API server's own cost of N WasmletNode status writes, with nothing else running.

    scripts/apiserver-write-floor.py N [TESTBED]     (TESTBED: /tmp/k8s-testbed)

Makes N WasmletNodes (floor-0000 …) as the testbed's admin, writes each one's status by
merge patch three times over 8 connections — a rollout's writes without the nodes, the
registry or any watcher — prints the wall time and the kube-apiserver's CPU for each
pass, and deletes the objects. The floor under bench/benches/fleet_apiserver.rs's rows.
"""
import http.client, ssl, json, time, sys, os, concurrent.futures
P = (sys.argv[2] if len(sys.argv) > 2 else "/tmp/k8s-testbed") + "/pki"
ctx=ssl.create_default_context(cafile=P+"/ca.crt"); ctx.load_cert_chain(P+"/admin.crt", P+"/admin.key")
def conn(): return http.client.HTTPSConnection("127.0.0.1",6443,context=ctx)
N=int(sys.argv[1])
def apid():
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/comm").read().strip()=="kube-apiserver": return p
            except: pass
pid=apid()
def cpu():
    f=open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split(); return (int(f[11])+int(f[12]))/100
B="/apis/wasmlet.dev/v1alpha1/wasmletnodes"
def make(i):
    c=conn(); body=json.dumps({"apiVersion":"wasmlet.dev/v1alpha1","kind":"WasmletNode","metadata":{"name":f"floor-{i:04d}"}})
    c.request("POST",B,body,{"Content-Type":"application/json"}); c.getresponse().read()
with concurrent.futures.ThreadPoolExecutor(8) as ex: list(ex.map(make, range(N)))
def patch(rng, gen):
    c=conn()
    for i in rng:
        body=json.dumps({"status":{"plugins":[{"name":"scale","observedGeneration":gen,"state":"Loaded","digest":"sha256:"+"a"*64,"lastTransitionTime":"2026-11-26T17:00:00Z"}],"serving":1,"failed":0,"pending":0}})
        c.request("PATCH",f"{B}/floor-{i:04d}/status?fieldManager=wasmlet-node/floor-{i:04d}",body,{"Content-Type":"application/merge-patch+json"}); c.getresponse().read()
for gen in (1,2,3):
    c0=cpu(); t=time.time()
    chunks=[range(k,N,8) for k in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as ex: list(ex.map(lambda r: patch(r,gen), chunks))
    print(f"{N} status merge patches: {time.time()-t:.2f} s wall, kube-apiserver {cpu()-c0:.2f} s CPU")
def rm(i):
    c=conn(); c.request("DELETE",f"{B}/floor-{i:04d}"); c.getresponse().read()
with concurrent.futures.ThreadPoolExecutor(8) as ex: list(ex.map(rm, range(N)))
