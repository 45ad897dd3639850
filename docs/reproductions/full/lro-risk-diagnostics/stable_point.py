import numpy as np, time
from lsa_native import theory
from lsa_native import population_multihead as pm
d,N,seed=6,20,0
rng=np.random.default_rng([seed,0])
Q,_=np.linalg.qr(rng.standard_normal((d,d)))
Lam=Q@np.diag(np.linspace(2.0,0.4,d))@Q.T
TL=theory.pcr_risks(Lam,N)
lam,V=np.linalg.eigh(Lam); lam,V=lam[::-1],V[:,::-1]
G=(1+1/N)*lam+lam.sum()/N
for r in (1,2,3):
    W_pv=np.zeros((1,d+1,d+1)); W_pv[0,d,d]=1.0
    Wk=np.zeros((1,r,d+1)); Wk[0,:,:d]=(V[:,:r]/np.sqrt(G[:r])).T
    Wq=Wk.copy()
    l=pm.multihead_loss(W_pv,(Wk,Wq),Lam,N) if True else None
    print("r",r,"loss at PCR construction",l,"L_r",TL[r])
    g=np.random.default_rng(5)
    for eps in (1e-3,1e-1):
        P=W_pv+eps*g.standard_normal(W_pv.shape); K=Wk+eps*g.standard_normal(Wk.shape); Qq=Wq+eps*g.standard_normal(Wq.shape)
        fl=pm.multihead_gradient_flow(P,(K,Qq),N,Lambda=Lam,times=[0,1e3,1e5],method="auto",rtol=1e-11,atol=1e-14)
        print("   eps",eps,fl.losses)
# the spurious point: perturb and reflow
r=2; g=np.random.default_rng([seed,1,r,0])
W_pv=0.5*g.standard_normal((1,d+1,d+1)); keys=tuple(0.5*g.standard_normal((1,r,d+1)) for _ in range(2))
fl=pm.multihead_gradient_flow(W_pv,keys,N,Lambda=Lam,times=[0,1e5],method="auto",rtol=1e-11,atol=1e-14)
P,K,Qq=fl.final_W_pv,fl.final_W_k,fl.final_W_q
print("spurious p:",np.round(P[0,d],4)); print("Wk:",np.round(K[0],4)); print("Wq:",np.round(Qq[0],4))
for eps in (1e-4,1e-2,1e-1):
    h=np.random.default_rng(9)
    f2=pm.multihead_gradient_flow(P+eps*h.standard_normal(P.shape),(K+eps*h.standard_normal(K.shape),Qq+eps*h.standard_normal(Qq.shape)),N,Lambda=Lam,times=[0,1e3,1e5],method="auto",rtol=1e-11,atol=1e-14)
    print(" reflow eps",eps,f2.losses)
