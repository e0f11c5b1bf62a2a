# Twenty-fourth session, offline (CPU, float64): the share of verify tests the top-p bounds leave pending on the
# benchmark's row model, X2 alone against level sets (gaps below x_d). Usage: python sim_pending.py ROWS VOCAB
import math, torch, sys
V=int(sys.argv[2]) if len(sys.argv)>2 else 248320; N=int(sys.argv[1]) if len(sys.argv)>1 else 60; p=0.9; TOL=1e-4
g=torch.Generator().manual_seed(1)
logits=torch.randn(N,V,generator=g,dtype=torch.float64)*3
pk=torch.randint(0,V,(N,),generator=g)
logits[torch.arange(N),pk]=math.log(V)+4.5+(torch.rand(N,generator=g,dtype=torch.float64)*4-1)
CONFIGS={'x2':[], 'L4g2':[2,4,8,16], 'L3g4':[4,8,16], 'L3g2':[2,4,8], 'L2g6':[6,12], 'L2g4':[4,8], 'L2g5':[5,10], 'L1g8':[8]}
def row(x):
    M=x.max(); e=torch.exp(x-M); S=float(e.sum())
    xs,order=torch.sort(x); es=e[order]; cs=torch.cumsum(es,0)
    T=(1-p)*S
    drafts=[(int(torch.argmax(x)),0.7)]+[(int(t),0.3/10) for t in torch.multinomial((e/S).float(),10,replacement=True,generator=g)]
    out={k:0.0 for k in CONFIGS}
    for d,w in drafts:
        xd=float(x[d]); rank=int((x<xd).sum())
        Rb=float(cs[rank-1]) if rank>0 else 0.0
        ed=float(e[d]); low=Rb+ed
        if abs(low-T)<=TOL*S or abs(Rb-T)<=TOL*S:
            for k in out: out[k]+=w
            continue
        if low<=T: continue
        X2=float(xs[rank-1]) if rank>0 else -math.inf
        for k,deltas in CONFIGS.items():
            ecb=math.exp(X2-float(M))
            for dl in deltas:
                tau=xd-dl
                i=int(torch.searchsorted(xs,torch.tensor(tau,dtype=torch.float64)))
                H=S-(float(cs[i-1]) if i>0 else 0.0)
                if H < p*S*(1-TOL): ecb=min(ecb, math.exp(tau-float(M)))
            lo=max(p*S,S-Rb)*(1-TOL); hi=((S-Rb) if Rb<=T else min(S,p*S+ecb))*(1+TOL)
            a=xd-float(M)-math.log(hi)-1e-5; b=xd-float(M)-math.log(lo)+1e-5
            out[k]+=w*max(0.0,min(1.0,math.exp(min(b,0)))-min(1.0,math.exp(min(a,0))))
    return out
tot={k:0.0 for k in CONFIGS}
for n in range(N):
    o=row(logits[n])
    for k in o: tot[k]+=o[k]/N
print({k:round(v,6) for k,v in tot.items()})
