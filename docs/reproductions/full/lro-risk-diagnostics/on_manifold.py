import numpy as np, time
from lsa_native import theory
from lsa_native import population_multihead as pm
d,N,seed=6,20,0
rng=np.random.default_rng([seed,0])
Q,_=np.linalg.qr(rng.standard_normal((d,d)))
Lam=Q@np.diag(np.linspace(2.0,0.4,d))@Q.T
TL=theory.pcr_risks(Lam,N)
for r in range(1,d+1):
  res=[];offp=[]
  for k in range(5):
    g=np.random.default_rng([seed,1,r,k]); s=0.5
    W_pv=s*g.standard_normal((1,d+1,d+1)); keys=[s*g.standard_normal((1,r,d+1)) for _ in range(2)]
    W_pv[0,d,:d]=0; keys[0][0,:,d]=0; keys[1][0,:,d]=0
    fl=pm.multihead_gradient_flow(W_pv,tuple(keys),N,Lambda=Lam,times=[0,1e6],method="auto",rtol=1e-11,atol=1e-14)
    res.append((fl.final_loss-TL[r])/TL[r]); offp.append(np.abs(fl.final_W_pv[0,d,:d]).max())
  print(r, ["%.1e"%x for x in res], "max|p1| %.1e"%max(offp))
