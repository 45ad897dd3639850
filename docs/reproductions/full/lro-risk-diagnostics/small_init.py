import numpy as np, time
from lsa_native import theory
from lsa_native import population_multihead as pm
d,N,seed=6,20,0
rng=np.random.default_rng([seed,0])
Q,_=np.linalg.qr(rng.standard_normal((d,d)))
Lam=Q@np.diag(np.linspace(2.0,0.4,d))@Q.T
TL=theory.pcr_risks(Lam,N)
for r in range(1,d+1):
  res=[]
  for k in range(3):
    g=np.random.default_rng([seed,2,r,k]); s=0.01
    W_pv=s*g.standard_normal((1,d+1,d+1)); keys=tuple(s*g.standard_normal((1,r,d+1)) for _ in range(2))
    t0=time.time()
    fl=pm.multihead_gradient_flow(W_pv,keys,N,Lambda=Lam,times=[0,1e6],method="auto",rtol=1e-11,atol=1e-14)
    res.append((fl.final_loss-TL[r])/TL[r]); 
  print(r, ["%.1e"%x for x in res], f"{time.time()-t0:.1f}s")
