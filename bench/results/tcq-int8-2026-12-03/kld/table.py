import json, glob, os
O='/tmp/tcq8-kld'
def recs(f):
    if not os.path.exists(f): return []
    return [json.loads(l) for l in open(f) if l.strip() and json.loads(l).get('record')=='summary']
for M in ['SmolLM2-135M-Instruct.Q4_1.gguf','gemma-3-270m-q4_k_m.gguf']:
    print(f'\n**{M}**\n\n| what | before (58c088f) KLD ± se | top1 | after KLD ± se | top1 |\n|---|---|---|---|---|')
    for W in ['tcq:4','tcq:4+chscale']:
        b=recs(f'{O}/before-w-{W}-{M}.json'); a=recs(f'{O}/after-w-{W}-{M}.json')
        fm=lambda r: (f"{r['kld']:.4f} ± {r['kld_se']:.4f}", f"{r['top1']:.4f}") if r else ('-','-')
        bb=fm(b[0] if b else None); aa=fm(a[0] if a else None)
        print(f'| weights {W} | {bb[0]} | {bb[1]} | {aa[0]} | {aa[1]} |')
    b=recs(f'{O}/before-cache-{M}.json'); a=recs(f'{O}/after-cache-{M}.json')
    for i,r in enumerate(b):
        ar=[x for x in a if x['policy']==r['policy']]
        s=f"| cache {r['policy']} | {r['kld']:.4f} ± {r['kld_se']:.4f} | {r['top1']:.4f} | "
        s+= (f"{ar[0]['kld']:.4f} ± {ar[0]['kld_se']:.4f} | {ar[0]['top1']:.4f} |" if ar else "- | - |")
        print(s)
