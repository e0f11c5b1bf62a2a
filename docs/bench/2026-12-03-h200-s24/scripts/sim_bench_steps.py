# Twenty-fourth session, offline (CPU, float64): pending requests of the bench's own steps (Inputs.make, CPU
# generator, so not the GPU's rows) under X2 alone and two level sets. Usage: python sim_bench_steps.py STEPS
import math, sys, torch
sys.path.insert(0, '.')
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.oracle import rng as orng
p=0.9; TOL=1e-4; LM=1e-5
def verdict(x, d, u, gaps):
    M=x.max(); e=torch.exp(x-M); S=float(e.sum())
    xd=float(x[d]); before=(x<x[d])|((x==x[d])&(torch.arange(x.numel())<d))
    rb=float(e[before].sum()); ed=float(e[d]); omp=(1-p)*S; low=rb+ed
    if abs(low-omp)<=TOL*S or abs(rb-omp)<=TOL*S: return 'P'
    if low<=omp: return 'R'
    lo=max(p*S,S-rb); hi=S-rb
    if rb>omp:
        ec=math.exp(float(x[before].max()-M))
        for g in gaps:
            H=float(e[x>=xd-g].sum())
            if H<p*S*(1-TOL): ec=min(ec, math.exp(xd-g-float(M)))
        hi=min(S,p*S+ec)
    lo*=1-TOL; hi*=1+TOL; thr=math.log(u)
    if xd-float(M)-math.log(hi)>thr+LM: return 'A'
    if xd-float(M)-math.log(lo)>thr-LM: return 'P'
    # exact decision
    xs,o=torch.sort(x,stable=True); cs=torch.cumsum(e[o],0); j=int(torch.searchsorted(cs,torch.tensor(omp,dtype=torch.float64),right=True))
    Sk=S-(float(cs[j-1]) if j>0 else 0.0)
    return 'A' if xd-float(M)-math.log(Sk)>thr else 'R'
R,k,V=64,4,248320
for seed in range(1000, 1000+int(sys.argv[1])):
    inp=Inputs.make(V,R,k,seed=seed,device='cpu'); st=inp.step(p)
    X=inp.logits.double(); res={}
    for name,gaps in [('x2',[]),('L4g2',[2,4,8,16]),('L2g4',[4,8])]:
        pend=0
        for r in range(R):
            for i in range(k):
                row=r*(k+1)+i; d=int(inp.draft_ids[row]); u=float(orng.accept_uniform(inp.seeds[r:r+1], inp.positions[row:row+1])[0])
                v=verdict(X[row], d, u, gaps)
                if v=='P': pend+=1; break
                if v=='R': break
        res[name]=pend
    print(seed, res, flush=True)
